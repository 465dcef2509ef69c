"""What to tell the user when Spark fails during `kraft audit` (exit status 3).

`explain` turns an exception raised by a step (a Py4J error carrying a Java exception, a
PySpark error, or the driver JVM having gone away) into one line naming the step, the cause
and the setting to change. The exception's full text and traceback go to a log file, never to
the terminal. Spark's own log (`spark.log`, see `kraft_pipeline.session`) is read too: when
the driver JVM dies of an OutOfMemoryError, the Python side only sees a lost connection.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from kraft_pipeline.session import JVM_OUTPUT

EXIT_SPARK_FAILURE = 3
"""Exit status of an audit that Spark could not finish (1 = findings with --strict, 2 = bad
input)."""

_OOM = ("OutOfMemoryError", "Java heap space", "UNABLE_TO_ACQUIRE_MEMORY",
        "GC overhead limit exceeded")
_LOST_EXECUTOR = ("ExecutorLostFailure", "Lost executor", "executor lost", "Executor heartbeat",
                  "Remote RPC client disassociated", "worker lost")
_PYTHON_WORKER = ("Python worker exited unexpectedly", "PYTHON_WORKER_EXITED",
                  "Python worker failed to connect")
_JVM_GONE = ("Answer from Java side is empty", "Error while sending or receiving",
             "Connection refused", "Py4JNetworkError", "SparkContext was shut down",
             "Cannot call methods on a stopped SparkContext")
_BAD_SETTING = ("IllegalArgumentException", "NumberFormatException", "Invalid value",
                "INVALID_CONF_VALUE", "should be int", "should be long", "should be boolean",
                "ConfigException", "CANNOT_PARSE", "Invalid maximum heap size")


@dataclass(frozen=True)
class Failure:
    """Why a step failed and what to change."""

    cause: str
    remedy: str


def _first_line(text: str, limit: int = 200) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("at ", "Traceback", "File ", "^")):
            line = re.sub(r"\s+SQLSTATE: \w+", "", line.removeprefix("Caused by: "))
            # "pyspark.errors.exceptions.captured.IllegalArgumentException: ..." -> the class
            line = re.sub(r"^(?:[a-z_][\w]*\.)+(?=[A-Z]\w*: )", "", line)
            return line if len(line) <= limit else line[: limit - 3] + "..."
    return ""


def _jvm_refusal(text: str) -> str:
    """What a JVM that would not start said (`Invalid maximum heap size: -Xmx2q`, an
    unrecognised option, a missing class), not its closing `Error: Could not create...`."""
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("Error: Could not create", "Error: A fatal exception",
                                         "at ", "WARNING")):
            return line[:200]
    return ""


def _find(text: str, needles: tuple[str, ...]) -> str | None:
    for n in needles:
        if n in text:
            return n
    return None


_OOM_PHRASE = re.compile(
    r"((?:[\w.]*OutOfMemoryError)(?::[^\n]*)?|GC overhead limit exceeded)")


def _memory_line(text: str) -> str:
    found = _OOM_PHRASE.search(text)
    if found is None:
        return "OutOfMemoryError"
    phrase = re.sub(r"\s+SQLSTATE: \w+", "", found.group(1)).strip()
    return phrase if len(phrase) <= 160 else phrase[:157] + "..."


def _setting_line(text: str) -> str:
    """The line that names the rejected setting, else the first line."""
    for line in text.splitlines():
        if "spark." in line and re.search(r"should be|must be|[Ii]nvalid|cannot|Cannot", line):
            return _first_line(line)
    return _first_line(text)


def classify(text: str, master: str, driver_memory: str, log_text: str = "") -> Failure:
    """The cause and remedy for a failure whose exception text is `text` (`log_text` is the
    tail of Spark's log, consulted when the exception itself does not say)."""
    local = master.startswith("local")
    mem_hint = (f"raise --driver-memory (now {driver_memory})" if local else
                f"raise --conf spark.executor.memory (or --driver-memory, now {driver_memory}, "
                f"if the driver ran out)")
    if "System memory" in text and "must be at least" in text:
        return Failure(f"--driver-memory {driver_memory} is below what Spark needs to start "
                       f"({_first_line(text.split('must be at least', 1)[1])[:20].strip()} "
                       f"bytes of heap)", "use --driver-memory 1g or more")
    changed = re.search(r"FileChangedError: ([^\n]*)", text)
    if changed:  # a live node's directory changed under the audit (not Spark's doing)
        message = changed.group(1).split(": the batch", 1)[0].split(": cannot be read", 1)[0]
        return Failure(f"an input file changed while the audit read it ({message[:200]})",
                       "audit a copy of the replica directories, or the directories of "
                       "stopped nodes")
    if _find(text, _OOM):
        return Failure(f"out of memory ({_memory_line(text)})", mem_hint)
    if _find(text, _LOST_EXECUTOR):
        return Failure(f"an executor was lost ({_first_line(text)})",
                       "check the worker's log for why, and raise --conf spark.executor.memory "
                       "if it ran out of memory")
    if _find(text, _PYTHON_WORKER):
        return Failure(f"a Python worker died ({_first_line(text)})",
                       "check that the executors' Python has pyarrow and kraft-quorum[pipeline], "
                       "and raise --conf spark.executor.memoryOverhead if it was killed for "
                       "memory")
    if _find(text, _JVM_GONE):
        if _find(log_text, _OOM):
            return Failure(f"the driver JVM ran out of memory and exited "
                           f"({_memory_line(log_text)})", mem_hint)
        return Failure("the driver JVM exited", "see logs/spark.log for why; if it was killed "
                       f"for memory, {mem_hint}")
    if "JAVA_GATEWAY_EXITED" in text or "Java gateway process exited" in text:
        said = _jvm_refusal(log_text)
        return Failure("the driver JVM did not start" + (f" ({said})" if said else ""),
                       "check --driver-memory and any --conf spark.driver.* setting "
                       "(the JVM's output is in logs/jvm.log)")
    if _find(text, _BAD_SETTING):
        return Failure(f"Spark rejected a setting ({_setting_line(text)})",
                       "fix or drop the --conf (or --driver-memory) that sets it")
    if _find(log_text, _OOM):  # the exception lost its text (the JVM died with it)
        return Failure(f"out of memory ({_memory_line(log_text)})", mem_hint)
    return Failure(f"Spark failed ({_first_line(text) or 'no message'})",
                   "see the log for the full error")


def _text(exc: BaseException) -> str:
    # str() of a Py4JJavaError asks the JVM for the Java exception's text: when the JVM is
    # gone, that raises; keep what Py4J knew without asking.
    try:
        return str(exc)
    except Exception:  # the JVM cannot answer any more
        return str(getattr(exc, "errmsg", "") or repr(exc.args))


def exception_text(exc: BaseException) -> str:
    """The exception's type and message, with the Java exception's text for Py4J errors."""
    parts = [f"{type(exc).__module__}.{type(exc).__name__}: {_text(exc)}"]
    cause = exc.__cause__ or exc.__context__
    while cause is not None and len(parts) < 5:
        parts.append(f"{type(cause).__name__}: {_text(cause)}")
        cause = cause.__cause__ or cause.__context__
    return "\n".join(parts)


def tail(path: Path, limit: int = 256 * 1024) -> str:
    """The last `limit` bytes of a text file ('' when it is missing)."""
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - limit))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def explain(step: str, exc: BaseException, master: str, driver_memory: str,
            spark_log: Path | None = None) -> Failure:
    """The Failure for `exc`, raised in `step` (`spark_log` is OUT/logs/spark.log; the JVM's
    own output, `jvm.log` beside it, is read too)."""
    text = exception_text(exc)
    log_text = ""
    if spark_log is not None:  # the JVM's own output first: its last words when it died
        log_text = tail(spark_log.with_name(JVM_OUTPUT), 64 * 1024) + "\n" + tail(spark_log)
    return classify(text, master, driver_memory, log_text)
