"""Deploy bundle: preprocessing spec, Vitis AI Library prototxt, checksums, manifest, compile plan."""
import hashlib
import json
import os
import shutil
import subprocess

import pytest

from pipeline import deploy
from pipeline.errors import CompileError, ConfigError

# ImageNet mean/std in pixel units, RGB (torchvision's 0.485/0.229... times 255)
MEAN = [123.675, 116.28, 103.53]
STD = [58.395, 57.12, 57.375]


def _preprocess(**over):
    p = {"mean": MEAN, "std": STD, "channel_order": [2, 1, 0], "source_color": "BGR", "layout": "NCHW",
         "source_layout": "NHWC", "input_fix_pos": 5, "input_shape": [1, 3, 16, 16]}
    p.update(over)
    return p


def _dpu_model_param_list():
    """DpuModelParamList with the fields the bundle writes, numbered as in dpu_model_param.proto
    (src/vai_library/model_config/include/vitis/ai/proto/): DpuKernelParam{name=1, mean=2, scale=3},
    ClassificationParam{top_k=1, test_accuracy=2, preprocess_type=3 (enum PreprocessType)},
    DpuModelParam{name=1, kernel=2, model_type=3 (enum ModelType, CLASSIFICATION = 4),
    classification_param=7}, DpuModelParamList{model=1}."""
    from google.protobuf import descriptor_pb2, descriptor_pool

    from pipeline.xir.schema import message_classes
    f = descriptor_pb2.FileDescriptorProto(name="dpu_model_param_subset.proto", package="vitis.ai.proto",
                                           syntax="proto3")
    T = descriptor_pb2.FieldDescriptorProto
    kernel = f.message_type.add(name="DpuKernelParam")
    kernel.field.add(name="name", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    kernel.field.add(name="mean", number=2, type=T.TYPE_FLOAT, label=T.LABEL_REPEATED)
    kernel.field.add(name="scale", number=3, type=T.TYPE_FLOAT, label=T.LABEL_REPEATED)
    cls = f.message_type.add(name="ClassificationParam")
    cls.field.add(name="top_k", number=1, type=T.TYPE_INT32, label=T.LABEL_OPTIONAL)
    cls.field.add(name="test_accuracy", number=2, type=T.TYPE_BOOL, label=T.LABEL_OPTIONAL)
    preprocess_type = cls.enum_type.add(name="PreprocessType")
    for name, number in [("UNKNOWN_TYPE", 0), ("CAFFE", 1), ("VGG_PREPROCESS", 2), ("INCEPTION_PREPROCESS", 3),
                         ("INCEPTION_PT", 4), ("RESNET50_TF2", 5), ("EFFICIENTNET_PREPROCESS", 6),
                         ("OFA_RESNET50_PT", 7), ("OFA_DEPTHWISE_RES50", 8), ("RGB_PREPROCESS", 9),
                         ("OFA_RESNET50_PT2", 10)]:
        preprocess_type.value.add(name=name, number=number)
    cls.field.add(name="preprocess_type", number=3, type=T.TYPE_ENUM, label=T.LABEL_OPTIONAL,
                  type_name=".vitis.ai.proto.ClassificationParam.PreprocessType")
    model = f.message_type.add(name="DpuModelParam")
    model_type = model.enum_type.add(name="ModelType")
    model_type.value.add(name="UNKNOWN_TYPE", number=0)
    model_type.value.add(name="CLASSIFICATION", number=4)
    model.field.add(name="name", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    model.field.add(name="kernel", number=2, type=T.TYPE_MESSAGE, label=T.LABEL_REPEATED,
                    type_name=".vitis.ai.proto.DpuKernelParam")
    model.field.add(name="model_type", number=3, type=T.TYPE_ENUM, label=T.LABEL_OPTIONAL,
                    type_name=".vitis.ai.proto.DpuModelParam.ModelType")
    model.field.add(name="classification_param", number=7, type=T.TYPE_MESSAGE, label=T.LABEL_OPTIONAL,
                    type_name=".vitis.ai.proto.ClassificationParam")
    lst = f.message_type.add(name="DpuModelParamList")
    lst.field.add(name="model", number=1, type=T.TYPE_MESSAGE, label=T.LABEL_REPEATED,
                  type_name=".vitis.ai.proto.DpuModelParam")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_classes(pool, ["vitis.ai.proto.DpuModelParamList"])[0]


@pytest.fixture
def run(tmp_path):
    """A run folder with a compiled xmodel and a compile plan."""
    r = tmp_path / "run"
    (r / "compile").mkdir(parents=True)
    (r / "compile" / "net.xmodel").write_bytes(b"\x00compiled dpu model")
    (r / "compile" / "compile_plan.md").write_text("# Compile plan\n\n**Compiling needs the Vitis AI image.**\n")
    (r / "compile" / "compile.sh").write_text("#!/bin/sh\nvai_c_xir -x a -a b -o c -n net\n")
    return r


def _all_files(folder):
    out = []
    for root, _, names in os.walk(folder):
        for n in names:
            out.append(os.path.relpath(os.path.join(root, n), folder))
    return sorted(out)


def test_preprocess_spec_scale_is_one_over_std():
    spec = deploy.preprocess_spec(_preprocess())
    assert spec["scale"] == [1.0 / s for s in STD]
    assert spec["mean"] == MEAN and spec["channel_indices"] == [2, 1, 0]
    # a BGR source reversed at the boundary: the model sees RGB, and preprocess.json says so
    assert spec["channel_order"] == "RGB" and spec["source_channel_order"] == "BGR"
    assert spec["input_fix_pos"] == 5 and spec["dpu_layout"] == "NHWC" and spec["input_shape"] == [1, 3, 16, 16]
    # board arithmetic equals the pipeline's (x - mean) / std scaled by 2^fix_pos
    for pixel in (0.0, 17.0, 128.0, 255.0):
        for c in range(3):
            board = (pixel - spec["mean"][c]) * spec["scale"][c] * 2 ** 5
            host = (pixel - MEAN[c]) / STD[c] * 2 ** 5
            assert board == pytest.approx(host, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("bad, match", [
    ({"input_shape": [1, 1, 16, 16]}, "3 channels"),
    ({"input_fix_pos": 2.5}, "integer"),
])
def test_preprocess_spec_errors(bad, match):
    with pytest.raises(ConfigError, match=match):
        deploy.preprocess_spec(_preprocess(**bad))
    p = _preprocess()
    del p["layout"]
    with pytest.raises(ConfigError, match="layout"):
        deploy.preprocess_spec(p)


@pytest.mark.parametrize("color, indices, channels, seen", [
    ("RGB", None, 3, "RGB"), ("RGB", [2, 1, 0], 3, "BGR"), ("BGR", [2, 1, 0], 3, "RGB"), ("BGR", None, 3, "BGR"),
    ("L", None, 1, "L"), ("L", None, 3, "L"), ("RGB", [1], 1, "G"), (None, [2, 1, 0], 3, None)])
def test_model_color_follows_the_source_and_the_boundary_order(color, indices, channels, seen):
    assert deploy.model_color(color, indices, channels) == seen


def test_preprocess_spec_is_built_from_what_the_boundary_says_it_did():
    """The deploy step hands preprocess_spec the boundary's spec() plus the source's and the quantizer's
    facts; mean/std were checked where the boundary was made (specs.check_mean_std), not again here."""
    from pipeline.boundary import QuantizerBoundary
    boundary = QuantizerBoundary(MEAN, STD, channel_order=[2, 1, 0], kernel="torch")
    assert boundary.spec() == {"mean": MEAN, "std": STD, "channel_order": [2, 1, 0], "layout": "NCHW",
                               "dtype": "float32"}
    facts = {k: v for k, v in _preprocess().items() if k not in boundary.spec()}
    assert deploy.preprocess_spec(dict(boundary.spec(), **facts)) == deploy.preprocess_spec(_preprocess())
    cl = QuantizerBoundary(MEAN, STD, layout="channels_last", kernel="torch").spec()
    assert cl["layout"] == "channels_last" and cl["channel_order"] is None
    assert deploy.preprocess_spec(dict(cl, **facts))["channel_indices"] == [0, 1, 2]


def test_preprocess_spec_says_how_to_name_an_unknown_channel_order():
    spec = deploy.preprocess_spec(_preprocess(source_color=None, channel_order=None))
    assert "set data.source.color to RGB or BGR" in spec["channel_order"]
    assert spec["channel_indices"] == [0, 1, 2]
    assert "docs/" not in json.dumps(spec)  # user-facing: no internal citations


def test_prototxt_parses_as_dpu_model_param_list_with_mean_and_scale():
    from google.protobuf import text_format
    msg = text_format.Parse(deploy.model_prototxt("net", deploy.preprocess_spec(_preprocess()),
                                                  {"top_k": 5, "accuracy": 0.99}),
                            _dpu_model_param_list()())
    assert msg.model[0].model_type == 4  # CLASSIFICATION
    assert msg.model[0].classification_param.top_k == 5 and not msg.model[0].classification_param.test_accuracy
    assert not text_format.Parse(deploy.model_prototxt("net", deploy.preprocess_spec(_preprocess())),
                                 _dpu_model_param_list()()).model[0].HasField("classification_param")
    assert len(msg.model) == 1 and msg.model[0].name == "net"
    kernel = msg.model[0].kernel[0]
    assert kernel.name == "net_0"
    # the model sees RGB: the library feeds it with setInputImageRGB (preprocess_type RGB_PREPROCESS, 9), which
    # takes mean[c] and scale[c] for channel c of the BGR image it is given, so the kernel lists them B, G, R
    assert msg.model[0].classification_param.preprocess_type == 9
    assert list(kernel.mean) == pytest.approx(MEAN[::-1], rel=1e-7)
    assert list(kernel.scale) == pytest.approx([1 / s for s in STD[::-1]], rel=1e-7)
    # the VEK280 quickstart's resnet18_pt.prototxt: mean 103.53 116.28 123.675, scale 0.017429 0.017507 0.01712475
    assert list(kernel.mean) == pytest.approx([103.53, 116.28, 123.675], rel=1e-7)
    assert list(kernel.scale) == pytest.approx([0.017429, 0.017507, 0.01712475], rel=2e-5)


def test_compiled_bundle(run, tmp_path):
    out = tmp_path / "deploy"
    m = deploy.build_bundle(str(run), str(out), str(run / "compile" / "net.xmodel"), _preprocess(), "net")
    assert m["compiled"] is True and m["model_dir"] == "net"
    assert _all_files(str(out)) == ["manifest.json", "net/SHA256SUMS", "net/net.prototxt", "net/net.xmodel",
                                    "net/preprocess.json"]
    assert (out / "net" / "net.xmodel").read_bytes() == b"\x00compiled dpu model"
    assert json.loads((out / "manifest.json").read_text()) == m
    assert json.loads((out / "net" / "preprocess.json").read_text()) == deploy.preprocess_spec(_preprocess())
    listed = {f["path"]: f for f in m["files"]}
    assert sorted(listed) == [p for p in _all_files(str(out)) if p != "manifest.json"]
    for rel, f in listed.items():
        data = (out / rel).read_bytes()
        assert f["sha256"] == hashlib.sha256(data).hexdigest() and f["bytes"] == len(data)
    assert m["install"] == "scp -r net root@<board>:/usr/share/vitis_ai_library/models/"


def test_sha256sums_checks_on_the_board(run, tmp_path):
    out = tmp_path / "deploy"
    deploy.build_bundle(str(run), str(out), str(run / "compile" / "net.xmodel"), _preprocess(), "net")
    if shutil.which("sha256sum") is None:
        pytest.skip("sha256sum not installed")
    ok = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=str(out / "net"), stdout=subprocess.PIPE)
    assert ok.returncode == 0
    (out / "net" / "net.xmodel").write_bytes(b"tampered")
    bad = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=str(out / "net"), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    assert bad.returncode != 0


def test_accepts_the_compile_result_dict(run, tmp_path):
    compiled = {"xmodel": str(run / "compile" / "net.xmodel"), "returncode": 0}
    m = deploy.build_bundle(str(run), str(tmp_path / "d"), compiled, _preprocess(), "net")
    assert m["compiled"] and m["source_xmodel"] == compiled["xmodel"]


def test_uncompiled_bundle_carries_the_plan_and_no_xmodel(run, tmp_path):
    out = tmp_path / "deploy"
    m = deploy.build_bundle(str(run), str(out), None, _preprocess(input_fix_pos=None, input_shape=None), "net")
    files = _all_files(str(out))
    assert not [f for f in files if f.endswith(".xmodel")]
    assert "net/compile_plan.md" in files and "net/compile.sh" in files
    assert m["compiled"] is False and "needs the Vitis AI image" in m["status"]
    assert (out / "net" / "compile.sh").read_text() == (run / "compile" / "compile.sh").read_text()
    assert "2^fix_pos" in (out / "net" / "net.prototxt").read_text()
    from pipeline.fileio import process_umask
    assert out.stat().st_mode & 0o777 == 0o777 & ~process_umask()  # not mkdtemp's 0700: boards and users read it


# a quantized xmodel written by the real quantizer: input [1, 16, 16, 3] NHWC quantized with fix_pos 5, as _preprocess()
CONVNET = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "golden_xmodel", "golden", "convnet",
                       "default", "xmodel", "ConvNet_int.xmodel")


def test_uncompiled_bundle_carries_the_quantized_xmodel_with_its_sha256(run, tmp_path):
    import hashlib
    quantized = run / "export" / "ConvNet_int.xmodel"
    quantized.parent.mkdir(exist_ok=True)
    shutil.copyfile(CONVNET, str(quantized))
    data = quantized.read_bytes()
    out = tmp_path / "deploy"
    m = deploy.build_bundle(str(run), str(out), None, _preprocess(), "net", quantized_xmodel=str(quantized))
    assert (out / "net" / "ConvNet_int.xmodel").read_bytes() == data
    digest = hashlib.sha256(data).hexdigest()
    assert m["quantized_xmodel"] == {"path": "net/ConvNet_int.xmodel", "sha256": digest}
    assert "%s  ConvNet_int.xmodel" % digest in (out / "net" / "SHA256SUMS").read_text().splitlines()
    assert {"path": "net/ConvNet_int.xmodel", "sha256": digest, "bytes": len(data)} in m["files"]
    assert m["compiled"] is False and "net/ConvNet_int.xmodel is the quantized model" in m["status"]
    assert "net/compile.sh" in _all_files(str(out))
    # compiled: the compiled model goes in, the quantized one does not
    compiled = run / "net.xmodel"
    compiled.write_bytes(b"compiled")
    m = deploy.build_bundle(str(run), str(out), str(compiled), _preprocess(), "net", quantized_xmodel=str(quantized))
    assert m["quantized_xmodel"] is None and not (out / "net" / "ConvNet_int.xmodel").exists()


def test_no_xmodel_and_no_plan_is_an_error(tmp_path):
    out = tmp_path / "deploy"
    with pytest.raises(CompileError, match="no compiled xmodel and no compile plan"):
        deploy.build_bundle(str(tmp_path), str(out), None, _preprocess(), "net")
    assert not out.exists()


def test_missing_compiled_file_and_bad_name(run, tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        deploy.build_bundle(str(run), str(tmp_path / "d"), str(run / "nope.xmodel"), _preprocess(), "net")
    with pytest.raises(ConfigError, match="model name"):
        deploy.build_bundle(str(run), str(tmp_path / "d"), None, _preprocess(), "a/b")


def test_rebuild_replaces_a_bundle_but_never_a_foreign_folder(run, tmp_path):
    out = tmp_path / "deploy"
    deploy.build_bundle(str(run), str(out), str(run / "compile" / "net.xmodel"), _preprocess(), "net")
    m = deploy.build_bundle(str(run), str(out), None, _preprocess(), "net")
    assert not m["compiled"] and not (out / "net" / "net.xmodel").exists()
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="not a deploy bundle"):
        deploy.build_bundle(str(run), str(foreign), None, _preprocess(), "net")
    assert _all_files(str(foreign)) == ["notes.txt"]
    assert sorted(os.listdir(str(tmp_path))) == ["deploy", "mine", "run"], "temporary folders left behind"


@pytest.mark.parametrize("top_k", [0, 2.5, True, "5"])
def test_bad_top_k_is_refused_before_anything_is_written(run, tmp_path, top_k):
    out = tmp_path / "deploy"
    with pytest.raises(ConfigError, match="top_k must be an int >= 1"):
        deploy.build_bundle(str(run), str(out), None, _preprocess(), "net", classification={"top_k": top_k})
    assert not out.exists()
