"""The shape of Vitis AI's official QAT example (``example/resnet18_qat.py`` of vai_q_pytorch 3.5), on the
digits reference model and scikit-learn's digits, with only the import line changed: ``--mode train``
trains and writes the deployable files, ``--mode deploy`` (another process) exports the xmodel.
Used by tests/apis/test_qat_dropin.py."""
import argparse
import os

import torch
import torch.nn as nn
from sklearn.datasets import load_digits

from pipeline.apis import QatProcessor  # was: from pytorch_nndct import QatProcessor
from tests.support.qat_models import build

parser = argparse.ArgumentParser()
parser.add_argument("--mode", default="train", choices=["train", "deploy"])
parser.add_argument("--output_dir", default="./qat_models")
parser.add_argument("--quantizer_norm", default=True, type=bool)
args = parser.parse_args()


def data():
    d = load_digits()
    x = torch.from_numpy(d.images.astype("float32") / 16.0).unsqueeze(1)
    y = torch.from_numpy(d.target).long()
    return [(x[i:i + 24], y[i:i + 24]) for i in range(0, 240, 24)], (x[1000:1200], y[1000:1200])


def train_one_step(model, inputs, criterion, optimizer):
    model.train()
    images, target = inputs
    output = model(images)
    loss = criterion(output, target)
    l2_decay = 1e-4
    l2_norm = 0.0
    for param in model.quantizer_parameters():
        l2_norm += torch.pow(param, 2.0)[0]
    if args.quantizer_norm:
        loss += l2_decay * torch.sqrt(l2_norm)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss


def validate(val, model):
    model.eval()
    with torch.no_grad():
        return float((model(val[0]).argmax(1) == val[1]).float().mean())


def main():
    torch.set_num_threads(1)
    model, shape = build("digits")
    model.train()
    inputs = torch.randn([24, *shape], dtype=torch.float32)
    qat_processor = QatProcessor(model, inputs)
    train_batches, val = data()
    if args.mode == "train":
        quantized_model = qat_processor.trainable_model()
        param_groups = [{"params": quantized_model.quantizer_parameters(), "lr": 1e-2, "name": "quantizer"},
                        {"params": quantized_model.non_quantizer_parameters(), "lr": 1e-3, "name": "weight"}]
        optimizer = torch.optim.Adam(param_groups, lr=1e-3, betas=(0.9, 0.999), weight_decay=1e-4)
        criterion = nn.CrossEntropyLoss()
        for batch in train_batches:
            train_one_step(quantized_model, batch, criterion, optimizer)
        os.makedirs(args.output_dir, exist_ok=True)
        best_ckpt = os.path.join(args.output_dir, "model.pth")
        torch.save({"state_dict": quantized_model.state_dict()}, best_ckpt)
        quantized_model.load_state_dict(torch.load(best_ckpt)["state_dict"])
        deployable_model = qat_processor.to_deployable(quantized_model, args.output_dir)
        print("deployable accuracy %.4f" % validate(val, deployable_model))
    else:
        deployable_model = qat_processor.deployable_model(args.output_dir, used_for_xmodel=True)
        deployable_model(val[0][:1])
        qat_processor.export_xmodel(args.output_dir)


if __name__ == "__main__":
    main()
