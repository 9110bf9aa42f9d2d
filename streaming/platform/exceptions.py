"""Java exceptions as they reach Python: through py4j (``Py4JJavaError``) or PySpark (its
``CapturedException`` subclasses). No import of py4j or PySpark: the Kafka checks use this
before any session exists.
"""

from __future__ import annotations

__all__ = ["java_text"]


def java_text(error: BaseException) -> str:
    """The text of a Java exception raised through py4j or PySpark, its causes included (py4j's
    ``Py4JJavaError.java_exception``, PySpark's ``CapturedException._origin``: the Java
    ``Throwable``, asked for ``toString`` and ``getCause``)."""
    parts = [str(error)]
    java = getattr(error, "java_exception", None) or getattr(error, "_origin", None)
    for _ in range(10):
        if java is None:
            break
        try:
            parts.append(str(java.toString()))
            java = java.getCause()
        except Exception:  # a py4j object that cannot be asked: the text so far is enough
            break
    return "\n".join(parts)
