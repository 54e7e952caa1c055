"""The pipeline's error classes: one base class, one subclass per kind of failure.

Every error message says what was expected, what came in, and what to do. The command line
prints ``str(error)`` on one line and exits with status 2.
"""


class PipelineError(Exception):
    """Base class of every error the pipeline raises on purpose."""


class ConfigError(PipelineError):
    """The YAML config or a ``--set`` override is invalid (unknown key, wrong type, missing file)."""


class DataError(PipelineError):
    """Input data is unusable: empty, non-finite, wrong layout or channel count, unreadable file."""


class StageError(PipelineError):
    """A preprocessing stage got an input it cannot handle, or broke the view contract."""


class BackendUnavailableError(PipelineError):
    """A backend (pytorch_nndct, xir, vai_c_xir) is not installed here; the message says where to get it."""


class QuantizationError(PipelineError):
    """Calibration or quantized evaluation failed (zero batches, missing quant_info.json, mismatch)."""


class FingerprintMismatchError(QuantizationError):
    """The calibration on disk was made for another target, input shape, model or config."""


class StorageError(PipelineError):
    """A file could not be written (disk full, quota, read-only folder); nothing half-written was left."""


class RunFolderError(PipelineError):
    """A run folder cannot be used as asked: a state file (status.json, source.json, steps/<step>.json, ...)
    is damaged, of the wrong kind or type; the folder is not the pipeline's; or a run holds it while
    something else would write into it. The message names the file or folder, what was expected, what was
    found and what to do."""


class HandoffError(PipelineError):
    """A file one step handed to the next (an exported or compiled xmodel, the trained weights, the compile
    plan, the example input) is missing, empty, truncated, corrupted or another file than the step recorded
    (``pipeline.handoff``): the message names the file, the recorded and the found sha256, and the step to
    run again."""


class ExportError(PipelineError):
    """An export failed or its verification found mismatches (all of them are listed at once)."""


class CompileError(PipelineError):
    """``vai_c_xir`` failed or produced no compiled model.

    Attributes:
        argv: the command line that was run (a list of strings).
        returncode: the compiler's exit status (None if it never started).
        stderr_tail: the last lines of its standard error.
    """

    def __init__(self, message, argv=None, returncode=None, stderr_tail=""):
        super().__init__(message)
        self.argv = list(argv or [])
        self.returncode = returncode
        self.stderr_tail = stderr_tail


class DistributedError(PipelineError):
    """A rank of a torch.distributed run failed, timed out or was stopped; the message names it."""
