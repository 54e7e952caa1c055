"""train: train a zoo model on the train split and save its state_dict to model/float.pt."""
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from .base import Step, StepResult, omitted_when_none

if TYPE_CHECKING:  # the annotations only: importing the context imports torch
    from .context import StepContext

log = logging.getLogger("pipeline")


@dataclass
class TrainResult(StepResult):
    """steps/train.json: ``skipped`` and ``weights`` when model.weights is set; else the training metrics
    and ``handed_on``: the sha256 of model/float.pt, which the later steps check before they load it."""
    skipped: Optional[str] = omitted_when_none()
    epochs: Optional[int] = omitted_when_none()
    final_loss: Optional[float] = omitted_when_none()
    seconds: Optional[float] = omitted_when_none()
    train_accuracy: Optional[float] = omitted_when_none()
    train_images: Optional[int] = omitted_when_none()
    weights: Optional[str] = None


def run(ctx: "StepContext") -> TrainResult:
    from .model import check_labels
    import torch

    from .. import fileio
    from ..errors import DataError
    from ..handoff import record
    from ..models.loading import build_model, non_finite
    from ..train import accuracy, train_model
    from ..progress import progress
    m = ctx.cfg.model
    if weights_given(ctx.cfg):
        log.info("train: model.weights is set (%s); nothing to train", m.weights)
        return TrainResult(skipped="model.weights is set", weights=ctx.model.weights_path)
    torch.manual_seed(ctx.cfg.run.seed)
    model = build_model(m.zoo, m.factory, m.kwargs)
    check_labels(ctx.feed.source.labels, model.eval(), ctx.feed.example(), "train")
    ledger = ctx.feed.new_ledger()
    xs, ys = [], []  # the train split is not empty and has labels: preflight and check_labels
    for x, y in ctx.feed.batches("train", ledger=ledger):
        xs.append(x)
        ys.append(y)
    x_all, y_all = torch.cat(xs), torch.cat(ys)
    gen = torch.Generator().manual_seed(ctx.cfg.run.seed)
    bs = m.train.batch_size

    def epoch_batches():
        order = torch.randperm(len(y_all), generator=gen)
        for i in range(0, len(order), bs):
            idx = order[i:i + bs]
            yield x_all[idx], y_all[idx]

    def on_epoch(epoch: int, loss: float) -> None:
        bar.set_postfix(loss="%.4f" % loss)
        bar.update(1)
        log.debug("epoch %d loss %.4f", epoch, loss)

    log.info("train: %s on %d images, %d epoch%s of %d batches ...", type(model).__name__, len(y_all), m.train.epochs,
             "" if m.train.epochs == 1 else "s", -(-len(y_all) // bs))  # the line after training gives the time
    bar = progress(None, "train", total=m.train.epochs, unit="epoch")
    metrics = train_model(model, epoch_batches, m.train.epochs, m.train.lr, m.train.weight_decay,
                          ctx.cfg.run.seed, progress=on_epoch)
    bar.close()
    bad = non_finite(model.state_dict())
    if bad:
        raise DataError("train: the weights became NaN or Inf (%s; last loss %s): training diverged. Lower "
                        "model.train.lr (now %g); nothing was saved" % (bad, metrics["final_loss"], m.train.lr))
    train_acc, n = accuracy(model, [(x_all, y_all)])
    fileio.write_torch(ctx.model.weights_path, model.state_dict())
    log.info("train: %d images, %d epochs in %.1f s, train accuracy %.4f", n, metrics["epochs"],
             metrics["seconds"], train_acc)
    return TrainResult(epochs=metrics["epochs"], final_loss=metrics["final_loss"], seconds=metrics["seconds"],
                       train_accuracy=train_acc, train_images=n, weights=ctx.model.weights_path,
                       handed_on=record(ctx.folder.work_dir, [ctx.model.weights_path]))


def weights_given(cfg: Any) -> bool:
    """True when model.weights names the float model's weights: nothing to train, and its file is the user's."""
    return cfg.model.weights is not None


STEP = Step("train", run, writes="model", reads=("train",), given_by_config=weights_given, result=TrainResult)
