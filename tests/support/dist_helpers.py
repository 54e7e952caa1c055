"""Model factories for tests/distributed/test_distributed.py (``model.factory:
tests.support.dist_helpers:<name>``, with the repository on PYTHONPATH). Both build the digits CNN;
each first patches the distributed calibrator in its process."""
import os
import signal
import sys

from pipeline.models.loading import build_model


def digits_cnn_rank1_dies(**kwargs):
    """On rank 1, the calibration kills its own process (SIGKILL, no Python cleanup) at the start of
    the second round, as a crashed machine would."""
    if os.environ.get("RANK") == "1":
        from pipeline.quantizers.sim import dist_calib
        original = dist_calib.DistributedCalibrator._round

        def _round(self, x):
            if self.rounds == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            return original(self, x)

        dist_calib.DistributedCalibrator._round = _round
    return build_model("digits_cnn", None, kwargs)


def digits_cnn_reporting_mid_round_stops(**kwargs):
    """Prints ``bias correction stopped mid-round`` to stderr each time a bias's stop rule fires
    before the last batch of a round (the path where the rest of the round runs in parallel)."""
    from pipeline.quantizers.sim import dist_calib
    original = dist_calib.DistributedCalibrator._parallel_after_stop

    def _parallel_after_stop(self, *args):
        print("bias correction stopped mid-round", file=sys.stderr, flush=True)
        return original(self, *args)

    dist_calib.DistributedCalibrator._parallel_after_stop = _parallel_after_stop
    return build_model("digits_cnn", None, kwargs)
