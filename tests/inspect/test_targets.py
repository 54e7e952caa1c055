"""DPU target registry, arch.json reading and the arch.json/target check (public case P11)."""
import json

import pytest

from pipeline import targets
from pipeline.errors import ConfigError

# Type ids from target_factory.cpp and (isa_version, feature_code) from the target prototxts
# (docs/targets.md#names-and-fingerprints): fingerprint = type_id << 56 | isa << 48 | feature_code.
PROTOTXT_FIELDS = {
    "DPUCZDX8G_ISA1_B4096": (1, 0x01, 0x000056010407),
    "DPUCZDX8G_ISA1_B512": (1, 0x01, 0x000056010200),
    "DPUCVDX8G_ISA3_C32B3": (6, 0x03, 0x000B56011831),
    "DPUCAHX8H_ISA2_DWC": (2, 0x02, 0x00000010002B),
    "DPUCAHX8L_ISA0": (3, 0x00, 0x1D),
    "DPUCADF8H_ISA0": (7, 0x00, 0x0),
    "DPUCV2DX8G_ISA1_C20B14": (9, 0x01, 0x400044000E44),
}


def _write(path, content):
    path.write_text(json.dumps(content))
    return str(path)


@pytest.mark.parametrize("name", sorted(PROTOTXT_FIELDS))
def test_fingerprint_follows_the_target_factory_formula(name):
    type_id, isa, feature = PROTOTXT_FIELDS[name]
    assert targets.TARGETS[name].fingerprint == (type_id << 56) | (isa << 48) | feature


def test_2_5_fingerprints_of_mpsoc_use_feature_code_16():
    # v2.5 prototxts: DPUCZDX8G_ISA1_B4096 feature_code 0x000016010407 (docs/targets.md#names-and-fingerprints)
    assert targets.TARGETS["DPUCZDX8G_ISA1_B4096"].fingerprint_2_5 == (1 << 56) | (1 << 48) | 0x16010407
    for name, entry in targets.TARGETS.items():
        if entry.family == "DPUCZDX8G":
            assert entry.fingerprint_2_5 == entry.fingerprint - 0x40000000, name


def test_registry_entries_are_consistent():
    for name, entry in targets.TARGETS.items():
        assert name.startswith(entry.family + "_"), name
        assert set(entry.arch_json_by_board) <= set(entry.boards), name
        for board, path in entry.arch_json_by_board.items():
            assert path.startswith("/opt/vitis_ai/compiler/arch/%s/" % entry.family), path
            assert path.endswith("/arch.json")
    fps = [e.fingerprint for e in targets.TARGETS.values()]
    assert len(fps) == len(set(fps)), "two targets share a 3.x fingerprint"


def test_format_targets_lists_every_target_with_hex_fingerprints():
    text = targets.format_targets()
    for name in targets.TARGETS:
        assert name in text
    assert "0x0101000056010407" in text and "0x0101000016010407" in text
    assert "/opt/vitis_ai/compiler/arch/DPUCZDX8G/ZCU102/arch.json" in text


def test_unknown_and_expired_target_names_are_config_errors():
    with pytest.raises(ConfigError, match="DPUCZDX8G_ISA1_B4096"):
        targets.get_target("DPUCZDX8G_ISA1_B4069")
    with pytest.raises(ConfigError, match="DPUCZDX8G_ISA0_B4096_MAX_BG2"):
        targets.get_target("DPUCZDX8G_ISA0_B4096_MAX_BG2")


def test_get_target_returns_the_entry_with_its_default_arch_json():
    t = targets.get_target("DPUCZDX8G_ISA1_B4096")
    assert t.name == "DPUCZDX8G_ISA1_B4096" and t.family == "DPUCZDX8G"
    assert t.boards == ("ZCU102", "ZCU104", "KV260")
    assert t.arch_json == "/opt/vitis_ai/compiler/arch/DPUCZDX8G/ZCU102/arch.json"
    assert targets.get_target("DPUCZDX8G_ISA1_B512").arch_json is None


def test_arch_json_path_per_board():
    assert targets.arch_json_path("DPUCZDX8G_ISA1_B4096", "KV260") == \
        "/opt/vitis_ai/compiler/arch/DPUCZDX8G/KV260/arch.json"
    assert targets.arch_json_path("DPUCZDX8G_ISA1_B4096") == \
        "/opt/vitis_ai/compiler/arch/DPUCZDX8G/ZCU102/arch.json"
    with pytest.raises(ConfigError, match="VCK190"):
        targets.arch_json_path("DPUCZDX8G_ISA1_B4096", "VCK190")
    with pytest.raises(ConfigError, match="0x0101000056010200"):
        targets.arch_json_path("DPUCZDX8G_ISA1_B512")


def test_read_arch_json_by_target_and_by_fingerprint(tmp_path):
    by_name = _write(tmp_path / "a.json", {"target": "DPUCZDX8G_ISA1_B4096"})
    assert targets.read_arch_json(by_name) == ("DPUCZDX8G_ISA1_B4096", 0x0101000056010407)
    # the board images write the fingerprint without the leading zero (docs/targets.md#names-and-fingerprints)
    by_fp = _write(tmp_path / "b.json", {"fingerprint": "0x101000056010407"})
    assert targets.read_arch_json(by_fp) == ("DPUCZDX8G_ISA1_B4096", 0x0101000056010407)


def test_read_arch_json_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        targets.read_arch_json(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        targets.read_arch_json(str(bad))
    with pytest.raises(ConfigError, match="neither \"target\" nor \"fingerprint\""):
        targets.read_arch_json(_write(tmp_path / "c.json", {"dpu": 1}))
    with pytest.raises(ConfigError, match="not a hex number"):
        targets.read_arch_json(_write(tmp_path / "d.json", {"fingerprint": "zz"}))


def test_check_arch_json_accepts_the_matching_file(tmp_path):
    path = _write(tmp_path / "arch.json", {"fingerprint": "0x101000056010407"})
    assert targets.check_arch_json(path, "DPUCZDX8G_ISA1_B4096") == 0x0101000056010407
    path = _write(tmp_path / "arch2.json", {"target": "DPUCZDX8G_ISA1_B4096"})
    assert targets.check_arch_json(path, "DPUCZDX8G_ISA1_B4096") == 0x0101000056010407


def test_p11_arch_json_of_another_dpu(tmp_path):
    # VCK190 arch.json (C32B6, seen on VAI 3.0 images, Vitis-AI issue #1149) with target B4096
    path = _write(tmp_path / "arch.json", {"fingerprint": "0x603000b56011861"})
    with pytest.raises(ConfigError) as info:
        targets.check_arch_json(path, "DPUCZDX8G_ISA1_B4096")
    msg = str(info.value)
    assert "DPUCZDX8G_ISA1_B4096" in msg
    assert "0x0603000b56011861" in msg and "0x0101000056010407" in msg
    assert "DPUCVDX8G_ISA3_C32B6" in msg


def test_p11_arch_json_from_the_2_5_release(tmp_path):
    # VAI 2.5 / PYNQ-DPU 2.5 KV260 overlays report 0x101000016010407 (docs/targets.md#names-and-fingerprints)
    path = _write(tmp_path / "arch.json", {"fingerprint": "0x101000016010407"})
    with pytest.raises(ConfigError) as info:
        targets.check_arch_json(path, "DPUCZDX8G_ISA1_B4096")
    msg = str(info.value)
    assert "0x0101000016010407" in msg and "0x0101000056010407" in msg
    assert "2.5" in msg and "DPUCZDX8G_ISA1_B4096" in msg


def test_p11_arch_json_naming_another_target(tmp_path):
    path = _write(tmp_path / "arch.json", {"target": "DPUCZDX8G_ISA1_B1024"})
    with pytest.raises(ConfigError) as info:
        targets.check_arch_json(path, "DPUCZDX8G_ISA1_B4096")
    msg = str(info.value)
    assert "0x0101000056010402" in msg and "0x0101000056010407" in msg and "DPUCZDX8G_ISA1_B1024" in msg


def test_arch_json_with_unknown_fingerprint(tmp_path):
    path = _write(tmp_path / "arch.json", {"fingerprint": "0x1234"})
    with pytest.raises(ConfigError, match="no registered target"):
        targets.check_arch_json(path, "DPUCZDX8G_ISA1_B4096")


@pytest.mark.parametrize("content, holds", [
    ({}, "holds an empty object, neither \"target\" nor \"fingerprint\""),
    ({"dpu": "DPUCZDX8G", "cpu_arch": "arm64"}, "holds only the keys \"cpu_arch\", \"dpu\", neither \"target\" nor \"fingerprint\""),
    ([{"fingerprint": "0x101000056010407"}], "holds a JSON array ([{\"fingerprint\": \"0x101000056010407\"}])"),
    ("DPUCZDX8G_ISA1_B4096", "holds a JSON string (\"DPUCZDX8G_ISA1_B4096\")"),
    ({"target": None}, "holds \"target\": null, not a DPU target name"),
    ({"target": ""}, "holds \"target\": \"\", not a DPU target name"),
    ({"fingerprint": True}, "holds \"fingerprint\": true, not a hex number"),
    ({"fingerprint": "0x"}, "holds \"fingerprint\": \"0x\", not a hex number"),
])
def test_arch_json_the_compiler_cannot_use_is_refused_with_what_to_write(tmp_path, content, holds):
    path = _write(tmp_path / "arch.json", content)
    with pytest.raises(ConfigError) as info:
        targets.check_arch_json(path, "DPUCZDX8G_ISA1_B4096")
    msg = str(info.value)
    assert msg.startswith("arch_json: %s %s; vai_c_xir needs" % (path, holds)), msg
    # what vai_c_xir reads, for this very target, and where to get it
    assert '{"target": "DPUCZDX8G_ISA1_B4096"} or {"fingerprint": "0x0101000056010407"}' in msg
    assert "/opt/vitis_ai/compiler/arch/DPUCZDX8G/ZCU102/arch.json" in msg and "xdputil query" in msg
    # the same refusal without a configured target names the generic forms
    with pytest.raises(ConfigError) as generic:
        targets.read_arch_json(path)
    assert holds in str(generic.value) and '{"target": "<DPU target name>"} or {"fingerprint": "0x..."}' in str(generic.value)


ARCH_ROOT_HINT = "from the Vitis AI image ("


def test_arch_json_for_a_target_without_a_documented_image_path(tmp_path):
    path = _write(tmp_path / "arch.json", {"dpu": 1})
    with pytest.raises(ConfigError) as info:
        targets.check_arch_json(path, "DPUCZDX8G_ISA1_B512")
    msg = str(info.value)
    assert '{"target": "DPUCZDX8G_ISA1_B512"} or {"fingerprint": "0x0101000056010200"}' in msg
    assert "Write one of these into the file" in msg and ARCH_ROOT_HINT not in msg


def test_arch_json_naming_two_different_dpus_is_refused(tmp_path):
    path = _write(tmp_path / "arch.json", {"target": "DPUCZDX8G_ISA1_B1024", "fingerprint": "0x101000056010407"})
    with pytest.raises(ConfigError) as info:
        targets.check_arch_json(path, "DPUCZDX8G_ISA1_B4096")
    msg = str(info.value)
    assert "DPUCZDX8G_ISA1_B1024" in msg and "0x0101000056010402" in msg and "0x0101000056010407" in msg
    assert "different DPUs" in msg
    both = _write(tmp_path / "both.json", {"target": "DPUCZDX8G_ISA1_B4096", "fingerprint": "0x101000056010407"})
    assert targets.check_arch_json(both, "DPUCZDX8G_ISA1_B4096") == 0x0101000056010407
