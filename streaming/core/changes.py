"""The change-row contract: what every reader of inputs produces and every writer consumes.

A load's data becomes change rows (``inputs.loads``, ``inputs.jsonfiles``, ``apply.records``)
with these columns, which ``apply.objects`` folds and writes:

- ``id``: the key; ``data``: a struct of the schema's properties;
- ``__seq``: the change's order in the batch, ``action ordinal << SEQ_SHIFT | row`` — the
  ordinal of its action (source order, then action order; ``core.plan``) and its row within it;
- ``__tx``: the transaction id; ``__kind``: a ``core.fold.ChangeKind``;
- ``__cols`` (PATCH: the columns the source has), ``__flags`` (extended format: column → flags),
  ``__version`` and ``__created`` (REPLACE: the scope's new version and created time).
"""

from __future__ import annotations

__all__ = ["SEQ_SHIFT"]

SEQ_SHIFT = 32
"""``__seq >> SEQ_SHIFT`` is the action ordinal of a change (its position in the batch)."""
