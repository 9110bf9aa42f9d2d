"""One micro-batch of the sink, step by step (``runtime.sink.Sink`` is its entry).

The modules in the order a batch runs them: ``wiring`` (what the sink was built with),
``state`` (what it keeps between batches), ``context`` (one batch's id, commit identity and
feeds), ``run`` (the steps in their order), ``triage``, ``plan``, ``apply``, ``scd2``,
``record``, ``progress``.
"""
