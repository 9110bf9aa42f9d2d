"""The one door to the JVM: the only code that touches py4j and the JVM internals of Spark,
Delta and Hadoop (PySpark's ``_jvm``, ``_jsc``, ``_jdf``, ``_jsq``, ``_gateway``…).

Each reach is a small named function whose docstring says which internal it uses; the layers
above call these functions. ``tests/unit/test_jvm_door.py`` fails on a reach anywhere else, and
import-linter keeps ``py4j`` imports out of every other package (``make lint``).

- ``hadoop``: Hadoop's ``FileSystem`` of a path (local, s3a://, hdfs://, …), one implementation.
- ``delta``: Delta's ``DeltaLog`` and the snapshot this process holds.
- ``spark``: the session's, a frame's and a streaming query's internals, the gateway and its JVM.
- ``versions``: the running Spark and Delta versions (``core.versions`` judges them).
"""
