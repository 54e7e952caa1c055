"""A model factory for tests/test_distributed.py: on rank 1 it makes the calibration kill its own
process (SIGKILL, no Python cleanup) at the start of the second round, as a crashed machine would."""
import os
import signal

from pipeline.models.loading import build_model


def digits_cnn_rank1_dies(**kwargs):
    if os.environ.get("RANK") == "1":
        from pipeline.quantizers.sim import dist_calib
        original = dist_calib.DistributedCalibrator._round

        def _round(self, x):
            if self.rounds == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            return original(self, x)

        dist_calib.DistributedCalibrator._round = _round
    return build_model("digits_cnn", None, kwargs)
