"""edgepipe's errors: one root, subclasses that carry the context a log reader needs.

::

    EdgepipeError
    ├── PipelineError             the declaration is wrong (exit code 2)
    │   ├── PipelineFileError     a pipeline file cannot be loaded or called   (path, line)
    │   ├── ParameterError        a command-line parameter is unknown or ill-typed
    │   ├── GraphError            duplicate id, dangling input, cycle, type mismatch (node_id)
    │   └── OutputError           an output file (``--results``) cannot be written       (path)
    ├── NodeError                 a node failed while running (exit code 1)        (node_id)
    │   ├── NodeTimeout           one call ran past the node's ``timeout_s``
    │   └── NodeStuck             calls keep hanging and their threads never return
    └── ChannelClosed             put() on a channel that was closed            (channel)

``EndOfStream`` is not an error: a consumer gets it when its channel is closed and empty.
"""

from __future__ import annotations


class EdgepipeError(Exception):
    """Root of every error edgepipe raises on purpose."""


class PipelineError(EdgepipeError):
    """The pipeline as declared cannot run. The CLI maps it to exit code 2."""

    exit_code = 2


class PipelineFileError(PipelineError):
    """A pipeline file could not be imported, has no ``pipeline()``, or ``pipeline()`` failed."""

    def __init__(self, message: str, *, path: str, line: int | None = None) -> None:
        self.path = path
        self.line = line
        self.message = message
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: {message}")


class ParameterError(PipelineError):
    """A ``--name value`` parameter does not match the pipeline function's signature."""

    def __init__(self, message: str, *, path: str, line: int | None = None) -> None:
        self.path = path
        self.line = line
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: {message}")


class GraphError(PipelineError):
    """The graph is invalid. ``where`` is the ``file:line`` that declared the node, if known."""

    def __init__(self, message: str, *, node_id: str | None = None, where: str | None = None) -> None:
        self.node_id = node_id
        self.where = where
        prefix = f"{where}: " if where else ""
        subject = f"node '{node_id}': " if node_id else ""
        super().__init__(f"{prefix}{subject}{message}")


class OutputError(PipelineError):
    """An output path given on the command line cannot be opened for writing."""

    def __init__(self, message: str, *, path: str) -> None:
        self.path = path
        super().__init__(f"{path}: {message}")


class NodeError(EdgepipeError):
    """A node failed at run time and its error policy said to stop. Exit code 1."""

    exit_code = 1

    def __init__(self, message: str, *, node_id: str) -> None:
        self.node_id = node_id
        super().__init__(f"node '{node_id}': {message}")


class NodeTimeout(NodeError, TimeoutError):
    """One call of a node ran past its ``timeout_s`` and was abandoned."""


class NodeStuck(NodeError):
    """A node's calls ran past their deadline so often, with their threads never returning,
    that going on would only pile up stuck threads: the pipeline stops, so that a supervisor
    can restart the process (the one cure for a wedged driver)."""

    retryable = False


class ChannelClosed(EdgepipeError):
    """``put()`` on a channel that is closed: its consumer is gone or shutdown began."""

    def __init__(self, channel: str) -> None:
        self.channel = channel
        super().__init__(f"channel '{channel}' is closed")


class EndOfStream(Exception):
    """Raised by ``Channel.get()`` when the channel is closed and drained."""


def os_reason(exc: BaseException) -> str:
    """An OSError's reason as it reads inside a sentence: ``no space left on device`` (its
    ``strerror``, without the errno and the file name Python adds; FFmpeg's errors, which are no
    OSErrors, carry one too). Without one, the error's text. The first letter is lowercased
    unless it starts a capitalised word (``EOF``, ``I/O``)."""
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    if text[:1].isupper() and text[1:2].islower():
        text = text[:1].lower() + text[1:]
    return text


def error_text(exc: BaseException) -> str:
    """``Type: message`` for a log line or an error naming its cause."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class ExitCalled(RuntimeError):
    """User code called ``sys.exit()`` inside a node: that ends the node (by its error policy),
    never the whole process with an exit code edgepipe did not choose."""

    def __init__(self, exc: SystemExit) -> None:
        super().__init__(f"called sys.exit({exc.code!r}); a node cannot end the process: raise an "
                         "exception instead")  # fmt: skip
        self.code = exc.code


def first_failure(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The error to report for a failed run (its TaskGroup's ``group``): a node's error if there
    is one, then an interrupt, then one of ours (a watcher's), else the group."""
    leaves: list[BaseException] = []

    def walk(g: BaseExceptionGroup[BaseException]) -> None:
        for exc in g.exceptions:
            if isinstance(exc, BaseExceptionGroup):
                walk(exc)
            else:
                leaves.append(exc)

    walk(group)
    for exc in leaves:
        if isinstance(exc, NodeError):
            return exc
    for exc in leaves:
        if not isinstance(exc, Exception):  # KeyboardInterrupt, SystemExit
            return exc
    for exc in leaves:
        if isinstance(exc, EdgepipeError):  # a watcher's, e.g. the HTTP server's port in use
            return exc
    return group
