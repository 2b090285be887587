"""Property-based (hypothesis) fuzzing of the scene loaders and the motion-script parser (reliability item 12).

The property everywhere: feeding a loader any bytes never raises anything but the project's own error types
(:class:`physskin_gs.errors.PhysSkinError` and subclasses); a successful load gives a self-consistent result.

- INRIA PLY: valid files with a random layout (format, property order and types, SH degree, normals, extras,
  an extra element, NaN/Inf values) load back exactly; random headers (names, types, counts, formats, duplicated
  or missing properties, bad keywords, huge counts) and mutated valid files (truncated, bytes flipped, inserted,
  deleted, appended, element counts replaced) load or fail cleanly.
- PlayCanvas compressed PLY: tiny files encoded here, and the shared sample file, decode or fail cleanly
  after mutation.
- antimatter15 ``.splat``: random bytes of any length, with and without the extension; any file of
  headerless random bytes with a magic prefix (gzip, zip, glTF, ...) and a random extension.
- ``MotionScript.load``: random JSON documents (wrong types, missing or unknown keys, nested junk, huge
  numbers, NaN/Infinity) and raw text.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

from physskin_gs.cli.animate import MotionScript  # noqa: E402
from physskin_gs.errors import PhysSkinError  # noqa: E402
from physskin_gs.io import detect_format, load_scene  # noqa: E402
from physskin_gs.io.ply_header import PLY_TYPE_NAMES, PLY_TYPES  # noqa: E402

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                       HealthCheck.data_too_large])
FUZZ_SMALL = settings(FUZZ, max_examples=100)

SHARED = Path(os.environ.get("PHYSSKIN_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
# the tiny MIT PlayCanvas sample is in the repository (tests/data, see data/SOURCES.md); the shared copy is identical
_REPO_COMPRESSED = Path(__file__).resolve().parent / "data" / "playcanvas_test_sh.compressed.ply"
SHARED_COMPRESSED = (_REPO_COMPRESSED if _REPO_COMPRESSED.is_file()
                     else SHARED / "splats" / "playcanvas_test_sh.compressed.ply")

INRIA_CORE = ["x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2", "opacity",
              "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"]
CHUNK_PROPS = ["min_x", "min_y", "min_z", "max_x", "max_y", "max_z",
               "min_scale_x", "min_scale_y", "min_scale_z", "max_scale_x", "max_scale_y", "max_scale_z"]
CHUNK_COLOR = ["min_r", "min_g", "min_b", "max_r", "max_g", "max_b"]
PACKED = ["packed_position", "packed_rotation", "packed_scale", "packed_color"]
FORMATS = ("ascii", "binary_little_endian", "binary_big_endian")
TYPE_CODES = sorted(PLY_TYPE_NAMES)  # i1 u1 i2 u2 i4 u4 f4 f8


# ------------------------------------------------------------------------------------------------ helpers
@pytest.fixture(scope="module")
def fuzz_dir():
    with tempfile.TemporaryDirectory(prefix="physskin_fuzz_") as d:
        yield Path(d)


def _write(folder: Path, name: str, data: bytes) -> str:
    path = folder / name
    path.write_bytes(data)
    return str(path)


def _try(fn, *args, **kwargs):
    """``fn(*args)``, or None when it raises a PhysSkinError; any other exception fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SceneWarning, numpy cast / overflow RuntimeWarnings
        try:
            return fn(*args, **kwargs)
        except PhysSkinError:
            return None


def _try_load(path: str, **kwargs):
    scene = _try(load_scene, path, **kwargs)
    if scene is not None:
        _check_scene(scene)
    return scene


def _check_scene(scene) -> None:
    """Self-consistency of a loaded scene: shapes, dtypes, SH size, extras, provenance."""
    n = scene.num_gaussians
    assert n >= 1
    for name, shape in (("means", (n, 3)), ("quats", (n, 4)), ("log_scales", (n, 3)),
                        ("opacity_logits", (n,)), ("sh_dc", (n, 3))):
        t = getattr(scene, name)
        assert tuple(t.shape) == shape, name
        assert str(t.dtype) == "torch.float32", name
    assert scene.sh_rest.ndim == 3 and scene.sh_rest.shape[0] == n and scene.sh_rest.shape[2] == 3
    assert str(scene.sh_rest.dtype) == "torch.float32"
    k = scene.sh_rest.shape[1] + 1
    assert math.isqrt(k) ** 2 == k, "sh_rest K is not (d+1)^2 - 1"
    for name, t in scene.extra.items():
        assert tuple(t.shape) == (n,), name
    assert scene.format in ("inria-ply", "compressed-ply", "splat")
    assert os.path.isabs(scene.source)


def _token(v) -> str:
    """ASCII PLY token of a numpy scalar (floats through repr of the double: exact round trip, nan/inf)."""
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    return str(int(v))


def ply_bytes(fmt: str, elements, comments=()) -> bytes:
    """A PLY file. ``elements``: (name, props, rows) with props [(name, code)] or [(name, ("list", ct, it))];
    rows: a structured ndarray (scalar-only element) or a list of per-row value lists (lists as Python lists)."""
    head = ["ply", f"format {fmt} 1.0"] + [f"comment {c}" for c in comments]
    for name, props, rows in elements:
        head.append(f"element {name} {len(rows)}")
        for pname, t in props:
            if isinstance(t, tuple):
                head.append(f"property list {PLY_TYPE_NAMES[t[1]]} {PLY_TYPE_NAMES[t[2]]} {pname}")
            else:
                head.append(f"property {PLY_TYPE_NAMES[t]} {pname}")
    head.append("end_header")
    out = [("\n".join(head) + "\n").encode("utf-8")]
    bo = ">" if fmt == "binary_big_endian" else "<"
    for name, props, rows in elements:
        if isinstance(rows, np.ndarray):
            if fmt == "ascii":
                out.append("".join(" ".join(_token(v) for v in r) + "\n" for r in rows.tolist()).encode())
            else:
                out.append(rows.astype(rows.dtype.newbyteorder(bo) if bo == ">" else rows.dtype).tobytes())
            continue
        for row in rows:
            if fmt == "ascii":
                toks = []
                for (pname, t), v in zip(props, row):
                    toks += [str(len(v))] + [_token(x) for x in v] if isinstance(t, tuple) else [_token(v)]
                out.append((" ".join(toks) + "\n").encode())
            else:
                for (pname, t), v in zip(props, row):
                    if isinstance(t, tuple):
                        out.append(np.array(len(v), dtype=bo + t[1]).tobytes())
                        out.append(np.array(v, dtype=bo + t[2]).tobytes())
                    else:
                        out.append(np.array(v, dtype=bo + t).tobytes())
    return b"".join(out)


def _structured(columns: dict, types: dict, order) -> np.ndarray:
    """Little-endian structured array of ``columns`` (name -> (N,) array) in ``order`` with numpy ``types``."""
    n = len(next(iter(columns.values())))
    rec = np.empty(n, dtype=[(nm, "<" + types[nm]) for nm in order])
    with np.errstate(all="ignore"):
        for nm in order:
            rec[nm] = columns[nm]
    return rec


any_float = st.floats(allow_nan=True, allow_infinity=True)
F32_MAX = float(np.finfo(np.float32).max)
any_float32 = st.one_of(st.floats(-F32_MAX, F32_MAX, width=32),  # finite, then the special values
                        st.sampled_from([math.nan, math.inf, -math.inf, -0.0, F32_MAX, 1e-45]))


# ------------------------------------------------------------------------------------------------ mutations
@st.composite
def mutated(draw, data: bytes, header_len: int | None = None) -> bytes:
    """``data`` after 1-3 random edits: truncation, byte flips, insertion, deletion, appended bytes, and (with
    ``header_len``) edits inside the header."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["truncate", "flip", "flip_header", "insert", "delete", "append"]))
        end = len(out)
        if op == "flip_header" and header_len:
            end = min(end, header_len)
        pos = draw(st.integers(0, max(end - 1, 0)))
        if op == "truncate":
            del out[pos:]
        elif op in ("flip", "flip_header") and out:
            out[pos] ^= draw(st.integers(1, 255))
        elif op == "insert":
            out[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete":
            del out[pos:pos + draw(st.integers(1, 64))]
        elif op == "append":
            out += draw(st.binary(min_size=1, max_size=64))
    return bytes(out)


HUGE_COUNTS = [2 ** 31 - 1, 2 ** 31, 2 ** 32, 2 ** 32 + 1, 2 ** 40, 2 ** 63 - 1, 2 ** 63, 2 ** 64, 10 ** 30]


@st.composite
def recounted(draw, data: bytes) -> bytes:
    """``data`` with the count of one ``element`` line replaced by a huge / off-by-one / junk count."""
    lines = data.split(b"\n")
    idx = [i for i, ln in enumerate(lines[:200]) if ln.startswith(b"element ")]
    if not idx:
        return data
    i = draw(st.sampled_from(idx))
    name = lines[i].split()[1]
    count = draw(st.one_of(st.sampled_from(HUGE_COUNTS).map(str), st.integers(0, 600).map(str),
                           st.sampled_from(["-1", "abc", "1.5", "1e3", "0x10", "", "1 2"])))
    lines[i] = b"element " + name + b" " + count.encode()
    return b"\n".join(lines)


# ------------------------------------------------------------------------------------------------ INRIA PLY
@st.composite
def inria_files(draw):
    """(bytes, expected) of a valid INRIA 3DGS PLY with a random layout and random raw values."""
    fmt = draw(st.sampled_from(FORMATS))
    n = draw(st.integers(1, 5))
    degree = draw(st.sampled_from([0, 1, 2, 3]))
    k = (degree + 1) ** 2 - 1
    rest = [f"f_rest_{i}" for i in range(3 * k)]
    normals = ["nx", "ny", "nz"] if draw(st.booleans()) else []
    extra_names = draw(st.lists(st.sampled_from(["red", "green", "label", "seg_id", "w", "confidence"]),
                                max_size=3, unique=True))
    core = INRIA_CORE + rest + normals
    types = {nm: draw(st.sampled_from(["f4", "f8"])) for nm in core}
    types.update({nm: draw(st.sampled_from(TYPE_CODES)) for nm in extra_names})
    order = draw(st.permutations(core + extra_names))
    columns = {}
    for nm in core + extra_names:
        t = np.dtype(types[nm])
        if t.kind == "f":
            columns[nm] = draw(hnp.arrays(t, n, elements=any_float32 if t.itemsize == 4 else any_float))
        else:
            columns[nm] = draw(hnp.arrays(t, n))
    vertex = ("vertex", [(nm, types[nm]) for nm in order], _structured(columns, types, order))
    elements = [vertex]
    other = draw(st.sampled_from(["none", "face_before", "face_after", "meta_before", "meta_after"]))
    if other != "none":
        rows_n = draw(st.integers(0, 2))
        if other.startswith("face"):
            el = ("face", [("vertex_indices", ("list", "u1", "i4"))],
                  [[draw(st.lists(st.integers(0, 4), max_size=4))] for _ in range(rows_n)])
        else:
            el = ("meta", [("flag", "u1")], np.zeros(rows_n, dtype=[("flag", "u1")]))
        elements = [el, vertex] if other.endswith("before") else [vertex, el]
    quat_order = draw(st.sampled_from(["wxyz", "xyzw"]))
    comments = draw(st.lists(st.sampled_from(["made by fuzz", "element vertex 9", ""]), max_size=2))
    return ply_bytes(fmt, elements, comments), dict(columns=columns, types=types, k=k, quat_order=quat_order,
                                                     extra_names=extra_names, order=order)


def _f32(a) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(a).astype(np.float32)


@FUZZ
@given(case=inria_files())
def test_inria_valid_files_load_exactly(fuzz_dir, case):
    data, exp = case
    path = _write(fuzz_dir, "valid.ply", data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scene = load_scene(path, quat_order=exp["quat_order"])  # a valid file must load
    _check_scene(scene)
    c, k = exp["columns"], exp["k"]

    def stack(names):
        return np.stack([_f32(c[nm]) for nm in names], axis=1)

    assert scene.format == "inria-ply"
    np.testing.assert_array_equal(scene.means.numpy(), stack(["x", "y", "z"]))
    np.testing.assert_array_equal(scene.sh_dc.numpy(), stack(["f_dc_0", "f_dc_1", "f_dc_2"]))
    np.testing.assert_array_equal(scene.opacity_logits.numpy(), _f32(c["opacity"]))
    np.testing.assert_array_equal(scene.log_scales.numpy(), stack(["scale_0", "scale_1", "scale_2"]))
    rot = ["rot_0", "rot_1", "rot_2", "rot_3"]
    if exp["quat_order"] == "xyzw":
        rot = ["rot_3", "rot_0", "rot_1", "rot_2"]
    np.testing.assert_array_equal(scene.quats.numpy(), stack(rot))
    assert scene.sh_rest.shape[1] == k
    for ch in range(3):  # channel-major: f_rest_{ch * K + j} is coefficient j of channel ch
        for j in range(k):
            np.testing.assert_array_equal(scene.sh_rest[:, j, ch].numpy(), _f32(c[f"f_rest_{ch * k + j}"]))
    nrm = [nm for nm in ("nx", "ny", "nz") if nm in c]
    vals = np.concatenate([_f32(c[nm]) for nm in nrm]) if len(nrm) == 3 else np.zeros(0, np.float32)
    kept = list(nrm) if np.any(vals[np.isfinite(vals)] != 0) else []  # a file's real normals; zeros are not data
    assert list(scene.extra) == kept + [nm for nm in exp["order"] if nm in exp["extra_names"]]  # file order
    for nm in kept:
        np.testing.assert_array_equal(scene.extra[nm].numpy(), _f32(c[nm]))
    for nm in exp["extra_names"]:
        got = scene.extra[nm].numpy()
        if np.dtype(exp["types"][nm]).kind == "f":
            assert got.dtype == np.float32
            np.testing.assert_array_equal(got, _f32(c[nm]))
        else:
            assert got.dtype == np.dtype(exp["types"][nm])
            np.testing.assert_array_equal(got, c[nm])


@FUZZ
@given(case=inria_files(), data=st.data())
def test_inria_mutated_files_fail_cleanly(fuzz_dir, case, data):
    raw, exp = case
    header_len = raw.find(b"end_header") + len(b"end_header\n")
    if data.draw(st.booleans(), label="recount"):
        raw = data.draw(recounted(raw), label="recounted")
    raw = data.draw(mutated(raw, header_len), label="mutated")
    _try_load(_write(fuzz_dir, "mutated.ply", raw), quat_order=exp["quat_order"])


# random headers ------------------------------------------------------------------------------------------
PROP_NAMES = INRIA_CORE + ["nx", "ny", "nz", "f_rest_0", "f_rest_1", "f_rest_8", "f_rest_44", "f_rest_x"] \
    + PACKED + CHUNK_PROPS + CHUNK_COLOR + ["vertex_indices", "red", "foo", "end_header", "ünï"]
TYPE_NAMES = list(PLY_TYPES) + ["float33", "list", "uint64", "half", "Float"]
ELEMENT_NAMES = ["vertex", "vertex", "chunk", "sh", "face", "gaussian", "splat", "junk"]
count_tokens = st.one_of(st.integers(0, 3), st.sampled_from([255, 256, 257] + HUGE_COUNTS), st.integers(-3, -1)) \
    .map(str) | st.sampled_from(["abc", "1.5", "", "0x10", "1e3", "\u0663", "+2", "1_0"])
prop_lines = st.one_of(
    st.tuples(st.sampled_from(TYPE_NAMES), st.sampled_from(PROP_NAMES)).map(lambda t: f"property {t[0]} {t[1]}"),
    st.tuples(st.sampled_from(TYPE_NAMES), st.sampled_from(TYPE_NAMES), st.sampled_from(PROP_NAMES))
    .map(lambda t: f"property list {t[0]} {t[1]} {t[2]}"),
    st.sampled_from(["property", "property float", "property list uchar float", "property float a b c d e f"]),
)
PRESETS = {  # realistic property sets, perturbed below
    "inria": [("float", nm) for nm in INRIA_CORE],
    "inria_sh1": [("float", nm) for nm in INRIA_CORE[:6] + [f"f_rest_{i}" for i in range(9)] + INRIA_CORE[6:]],
    "chunk": [("float", nm) for nm in CHUNK_PROPS + CHUNK_COLOR],
    "packed": [("uint", nm) for nm in PACKED],
    "sh": [("uchar", f"f_rest_{i}") for i in range(9)],
}


@st.composite
def preset_props(draw):
    props = list(draw(st.permutations(PRESETS[draw(st.sampled_from(sorted(PRESETS)))])))
    keep = draw(st.lists(st.booleans(), min_size=len(props), max_size=len(props)))
    if any(keep) and draw(st.booleans()):
        props = [p for p, kp in zip(props, keep) if kp]  # drop some properties
    if props and draw(st.booleans()):
        i = draw(st.integers(0, len(props) - 1))
        props[i] = (draw(st.sampled_from(TYPE_NAMES)), props[i][1])  # change one type
    if props and draw(st.booleans()):
        props.append(draw(st.sampled_from(props)))  # duplicate one
    return [f"property {t} {nm}" for t, nm in props]


@st.composite
def random_ply(draw) -> bytes:
    magic = draw(st.sampled_from(["ply\n", "ply\n", "ply\r\n", "ply \n", "plyx\n"]))
    lines = [draw(st.sampled_from([f"format {f} 1.0" for f in FORMATS] * 2
                                  + ["format binary 1.0", "format ascii", "format", "format ASCII 1.0", ""]))]
    sizes, counts_ok = [], True
    for _ in range(draw(st.integers(0, 3))):
        name = draw(st.sampled_from(ELEMENT_NAMES))
        count = draw(count_tokens)
        lines.append(draw(st.sampled_from([f"element {name} {count}"] * 4 + [f"element {name}", "element"])))
        props = draw(st.one_of(preset_props(), st.lists(prop_lines, max_size=6)))
        lines += props
        row = 0
        for p in props:
            parts = p.split()
            if len(parts) == 3 and parts[1] in PLY_TYPES:
                row += np.dtype(PLY_TYPES[parts[1]]).itemsize
        sizes.append(row)
        counts_ok &= count.isdigit() and int(count) < 1000
        if counts_ok:
            sizes[-1] *= int(count)
    for _ in range(draw(st.integers(0, 2))):  # stray lines anywhere
        lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from(
            ["comment hello", "comment ünïcode", "obj_info x", "bogus keyword", "elements vertex 1", "\t",
             "property float late"])))
    end = draw(st.sampled_from(["end_header\n"] * 6 + ["end_header", "end_header\r\n", "end_headerx\n", ""]))
    header = (magic + "\n".join(lines) + "\n" + end).encode("utf-8")
    body_kind = draw(st.sampled_from(["random", "exact", "ascii"]))
    if body_kind == "exact" and counts_ok:  # the size the header declares (if all counts are small), +-1
        size = max(sum(sizes) + draw(st.sampled_from([0, 0, 0, -1, 1])), 0)
        body = draw(st.binary(min_size=size, max_size=size)) if size < 4096 else bytes(size)
    elif body_kind == "ascii":
        tok = st.sampled_from(["0", "1", "-1", "0.5", "nan", "inf", "-inf", "1e999", "255", "abc", "3"])
        body = "".join(" ".join(r) + "\n" for r in draw(st.lists(st.lists(tok, max_size=20), max_size=12))).encode()
    else:
        body = draw(st.binary(max_size=600))
    return header + body


SKELETONS = {  # (element, properties) of realistic files, perturbed by skeleton_ply
    "inria": [("vertex", PRESETS["inria"])],
    "inria_sh1_face": [("vertex", PRESETS["inria_sh1"]), ("face", [("list uchar int", "vertex_indices")])],
    "compressed": [("chunk", PRESETS["chunk"]), ("vertex", PRESETS["packed"])],
    "compressed_sh": [("chunk", PRESETS["chunk"][:12]), ("vertex", PRESETS["packed"]), ("sh", PRESETS["sh"])],
}


def _row_bytes(props) -> int:
    """Binary size of one row with empty lists (a list costs its count field)."""
    return sum(np.dtype(PLY_TYPES.get(t.split()[-2 if t.startswith("list") else 0], "u1")).itemsize for t, _ in props)


@st.composite
def skeleton_ply(draw) -> bytes:
    """A realistic 3DGS or compressed PLY header with 1-3 perturbations (duplicated element, list-typed, retyped,
    dropped or duplicated property, renamed element, extra element with a huge count, element order), and a body
    of the size the header declares (zeros: empty lists, so list-typed properties parse) or random bytes."""
    fmt = draw(st.sampled_from(FORMATS))
    n = draw(st.sampled_from([1, 2, 3, 256, 257]))
    elements = [[name, n if name != "chunk" else -(-n // 256), list(props)]
                for name, props in SKELETONS[draw(st.sampled_from(sorted(SKELETONS)))]]
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["dup_element", "listify", "retype", "drop", "dup_prop", "rename", "huge",
                                   "reorder", "none"]))
        e = draw(st.sampled_from(elements))
        i = draw(st.integers(0, max(len(e[2]) - 1, 0)))
        if op == "dup_element":
            copy = draw(st.sampled_from([list(e[2]), e[2][:i], [("float", "q")]]))  # same, fewer or other properties
            elements.insert(draw(st.integers(0, len(elements))), [e[0], e[1], copy])
        elif op == "listify" and e[2]:
            e[2][i] = (f"list {draw(st.sampled_from(['uchar', 'int', 'uint']))} {e[2][i][0]}", e[2][i][1])
        elif op == "retype" and e[2]:
            e[2][i] = (draw(st.sampled_from(list(PLY_TYPES))), e[2][i][1])
        elif op == "drop" and e[2]:
            del e[2][i]
        elif op == "dup_prop" and e[2]:
            e[2].append(e[2][i])
        elif op == "rename":
            e[0] = draw(st.sampled_from(ELEMENT_NAMES))
        elif op == "huge":
            elements.insert(draw(st.integers(0, len(elements))),
                            [draw(st.sampled_from(["face", "junk", "sh"])), draw(st.sampled_from(HUGE_COUNTS)),
                             draw(st.sampled_from([[], [("uchar", "flag")], [("list uchar int", "vertex_indices")]]))])
        elif op == "reorder":
            elements = draw(st.permutations(elements))
    head = ["ply", f"format {fmt} 1.0"]
    for name, count, props in elements:
        head.append(f"element {name} {count}")
        head += [f"property {t} {nm}" for t, nm in props]
    raw = ("\n".join(head) + "\nend_header\n").encode()
    sized = [(count, props) for _, count, props in elements if count < 10 ** 6]
    zeros = draw(st.booleans())
    if fmt == "ascii":
        body = "".join((" ".join("0" if zeros else draw(st.sampled_from(["0", "1", "nan", "1 7", "x"]))
                                 for _ in props) + "\n") * count for count, props in sized).encode()
    else:
        size = sum(count * _row_bytes(props) for count, props in sized)
        body = bytes(size) if zeros or size > 4096 else draw(st.binary(min_size=size, max_size=size))
    return raw + body


@FUZZ
@given(raw=st.one_of(random_ply(), skeleton_ply()), quat_order=st.sampled_from(["wxyz", "xyzw"]))
def test_random_ply_headers_fail_cleanly(fuzz_dir, raw, quat_order):
    _try_load(_write(fuzz_dir, "random.ply", raw), quat_order=quat_order)


# ------------------------------------------------------------------------------------------------ compressed PLY
@st.composite
def compressed_files(draw):
    """(bytes, n, K) of a valid tiny PlayCanvas compressed PLY with random packed words and chunk bounds."""
    fmt = draw(st.sampled_from(["binary_little_endian"] * 3 + ["binary_big_endian", "ascii"]))
    n = draw(st.integers(1, 40 if fmt == "ascii" else 300))
    nchunks = -(-n // 256)
    chunk_names = CHUNK_PROPS + (CHUNK_COLOR if draw(st.booleans()) else [])
    bounds = draw(hnp.arrays(np.float32, (nchunks, len(chunk_names)),
                             elements=st.one_of(st.floats(-100, 100, width=32), any_float32)))
    chunk = _structured({nm: bounds[:, i] for i, nm in enumerate(chunk_names)},
                        {nm: "f4" for nm in chunk_names}, chunk_names)
    words = draw(hnp.arrays(np.uint32, (n, 4)))
    vertex = _structured({nm: words[:, i] for i, nm in enumerate(PACKED)}, {nm: "u4" for nm in PACKED}, PACKED)
    elements = [("chunk", [(nm, "f4") for nm in chunk_names], chunk), ("vertex", [(nm, "u4") for nm in PACKED], vertex)]
    sh_kind = draw(st.sampled_from(["none", "sh", "sh", "empty", "junk_only"]))
    k = 0
    if sh_kind == "sh":
        k = (draw(st.sampled_from([1, 2, 3])) + 1) ** 2 - 1
        names = [f"f_rest_{i}" for i in range(3 * k)]
        u = draw(hnp.arrays(np.uint8, (n, 3 * k)))
        elements.append(("sh", [(nm, "u1") for nm in names],
                         _structured({nm: u[:, i] for i, nm in enumerate(names)}, {nm: "u1" for nm in names}, names)))
    elif sh_kind == "empty":  # an 'sh' element without properties
        elements.append(("sh", [], np.zeros(n, dtype=[])))
    elif sh_kind == "junk_only":  # an 'sh' element with properties but no f_rest_*
        elements.append(("sh", [("foo", "u1")], np.zeros(n, dtype=[("foo", "u1")])))
    return ply_bytes(fmt, elements), n, k, bounds[:, :6]


@FUZZ
@given(case=compressed_files(), data=st.data())
def test_compressed_ply_encoded_files(fuzz_dir, case, data):
    raw, n, k, bounds = case
    mutate = data.draw(st.integers(0, 2), label="mutate") > 0
    if mutate:
        header_len = raw.find(b"end_header") + len(b"end_header\n")
        if data.draw(st.booleans(), label="recount"):
            raw = data.draw(recounted(raw), label="recounted")
        raw = data.draw(mutated(raw, header_len), label="mutated")
    path = _write(fuzz_dir, "encoded.compressed.ply", raw)
    scene = _try_load(path)
    if mutate:
        return
    assert scene is not None, "a valid compressed PLY must load"
    assert scene.format == "compressed-ply" and scene.num_gaussians == n and scene.sh_rest.shape[1] == k
    assert np.isfinite(scene.quats.numpy()).all() and np.isfinite(scene.opacity_logits.numpy()).all()
    rest = scene.sh_rest.numpy()
    assert (np.abs(rest) <= 4.0).all()
    ci = np.arange(n) // 256
    lo, hi, m = bounds[ci, 0:3], bounds[ci, 3:6], scene.means.numpy()
    with np.errstate(all="ignore"):
        sane = np.isfinite(lo) & np.isfinite(hi) & (lo <= hi) & np.isfinite(hi - lo)
        tol = 1e-5 * (np.abs(lo) + np.abs(hi)) + 1e-6
        assert (m[sane] >= (lo - tol)[sane]).all() and (m[sane] <= (hi + tol)[sane]).all()


@FUZZ_SMALL
@given(data=st.data())
def test_compressed_ply_shared_file_mutated(fuzz_dir, data):
    if not SHARED_COMPRESSED.is_file():
        pytest.skip(f"sample {SHARED_COMPRESSED} not found (set PHYSSKIN_SHARED_DATA)")
    raw = SHARED_COMPRESSED.read_bytes()
    header_len = raw.find(b"end_header") + len(b"end_header\n")
    if data.draw(st.booleans(), label="recount"):
        raw = data.draw(recounted(raw), label="recounted")
    raw = data.draw(mutated(raw, header_len), label="mutated")
    _try_load(_write(fuzz_dir, "shared_mutated.compressed.ply", raw))


def test_compressed_ply_shared_file_loads():
    if not SHARED_COMPRESSED.is_file():
        pytest.skip(f"sample {SHARED_COMPRESSED} not found (set PHYSSKIN_SHARED_DATA)")
    scene = _try_load(str(SHARED_COMPRESSED))
    assert scene is not None and scene.format == "compressed-ply" and scene.num_gaussians == 64


# ------------------------------------------------------------------------------------------------ .splat and junk
@FUZZ
@given(raw=st.one_of(st.binary(min_size=1, max_size=400),
                     st.integers(1, 12).flatmap(lambda r: st.binary(min_size=32 * r, max_size=32 * r))),
       ext=st.sampled_from([".splat", ".splat", ""]), quat_order=st.sampled_from(["wxyz", "xyzw"]))
def test_splat_random_bytes(fuzz_dir, raw, ext, quat_order):
    path = _write(fuzz_dir, "random" + ext, raw)
    scene = _try_load(path, quat_order=quat_order)
    if _try(detect_format, path) == "splat":
        assert scene is not None and scene.format == "splat", "a file detected as .splat must load"
    if scene is None or scene.format != "splat":
        return
    n = len(raw) // 32
    assert len(raw) % 32 == 0 and scene.num_gaussians == n and scene.sh_rest.shape == (n, 0, 3)
    rec = np.frombuffer(raw, dtype="<f4").reshape(n, 8)
    np.testing.assert_array_equal(scene.means.numpy(), rec[:, 0:3])
    q = scene.quats.numpy()
    assert np.isfinite(q).all() and np.allclose(np.linalg.norm(q, axis=1), 1.0, atol=1e-5)
    assert np.isfinite(scene.opacity_logits.numpy()).all() and np.isfinite(scene.sh_dc.numpy()).all()


MAGICS = [b"", b"ply\n", b"ply\r\n", b"\x1f\x8b", b"\x1f\x8b\x08\x00", b"PK\x03\x04", b"glTF", b"solid ", b"v 1 2 3\n",
          b"NGSP", b"\x00" * 80]


@FUZZ
@given(magic=st.sampled_from(MAGICS), raw=st.binary(max_size=300),
       ext=st.sampled_from(["", ".ply", ".splat", ".obj", ".stl", ".glb", ".gltf", ".off", ".spz", ".ksplat",
                            ".sog", ".lcc", ".gz"]))
def test_any_bytes_fail_cleanly(fuzz_dir, magic, raw, ext):
    _try_load(_write(fuzz_dir, "junk" + ext, magic + raw))


@FUZZ_SMALL
@given(raw=st.binary(min_size=1, max_size=400), cut=st.integers(0, 400))
def test_gzip_streams_fail_cleanly(fuzz_dir, raw, cut):
    import gzip

    data = gzip.compress(b"NGSP" + raw)
    _try_load(_write(fuzz_dir, "stream.spz.gz", data[:max(2, len(data) - cut)]))


# ------------------------------------------------------------------------------------------------ MotionScript
# +-10**e: past int64 (e = 19, 20), past a double (400), 2**63 and 2**1024 (mapped: keeps the strategy repr short)
huge_int = st.tuples(st.sampled_from([19, 20, 400, -63, -1024]), st.sampled_from([1, -1])) \
    .map(lambda t: t[1] * (10 ** t[0] if t[0] > 0 else 2 ** -t[0]))
json_number = st.one_of(st.integers(-5, 60), st.floats(allow_nan=True, allow_infinity=True), huge_int,
                        st.sampled_from([1.0, 10.0, 1e300, -1.0, 0.0, -0.0]))
json_scalar = st.one_of(json_number, st.booleans(), st.none(), st.text(max_size=4))
json_junk = st.recursive(json_scalar, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                           st.dictionaries(st.text(max_size=6), kids, max_size=4)),
                         max_leaves=12)
vec3 = st.one_of(st.lists(st.one_of(st.floats(-10, 10), st.integers(-10, 10)), min_size=3, max_size=3),
                 st.lists(json_number, min_size=3, max_size=3), st.lists(json_scalar, max_size=5), json_junk)
frame = st.one_of(st.integers(1, 40), json_number, json_junk)
keyframe = st.one_of(
    st.fixed_dictionaries({"frame": frame}, optional={"target": vec3, "offset": vec3, "comment": json_junk,
                                                      "bogus": json_junk}),
    json_junk)
drag = st.one_of(
    st.fixed_dictionaries({"keyframes": st.one_of(st.lists(keyframe, max_size=4), json_junk)},
                          optional={"handle": frame, "point": vec3, "radius": json_number, "start_frame": frame,
                                    "end_frame": st.one_of(st.just(-1), frame), "comment": json_junk,
                                    "unknown": json_junk}),
    json_junk)
script = st.one_of(st.fixed_dictionaries({"drags": st.one_of(st.lists(drag, max_size=4), json_junk)},
                                         optional={"comment": json_junk, "version": json_junk}),
                   json_junk)


class _FakeAnim:
    """Records the drags MotionScript.apply starts and moves."""

    num_handles = 5

    def __init__(self):
        self.n = 0

    def start_drag(self, point, radius=None):
        self.n += 1
        return self.n

    def start_handle_drag(self, h):
        self.n += 1
        return self.n

    def handle_positions(self):
        return np.zeros((self.num_handles, 3))

    def update_drag(self, did, target):
        assert len(target) == 3

    def end_drag(self, did):
        pass


def _check_script(ms: MotionScript) -> None:
    for d in ms.drags:
        assert ("handle" in d) != ("point" in d)
        if "point" in d:
            assert len(d["point"]) == 3 and all(isinstance(x, float) and math.isfinite(x) for x in d["point"])
            assert "radius" not in d or (isinstance(d["radius"], float) and math.isfinite(d["radius"])
                                         and d["radius"] > 0)
        else:
            assert isinstance(d["handle"], int) and d["handle"] >= 0
        kf = d["_kf"]
        assert kf and [f for f, _, _ in kf] == sorted(f for f, _, _ in kf)
        assert len({kind for _, kind, _ in kf}) == 1
        for f, _, v in kf:
            assert isinstance(f, int) and f >= 1
            assert len(v) == 3 and all(isinstance(x, float) and math.isfinite(x) for x in v)
        assert isinstance(d["_start"], int) and d["_start"] >= 1
        assert d["_end"] == -1 or d["_end"] >= d["_start"]
    anim = _FakeAnim()
    from physskin_gs.errors import OptionError

    try:
        ms.validate(anim)
    except OptionError:
        return  # a handle outside the fake scene's range: apply() is only run after validate()
    for f in (1, 2, 3, 50):
        ms.apply(anim, f)


valid_vec = st.lists(st.one_of(st.floats(-10, 10), st.integers(-10, 10)), min_size=3, max_size=3)
valid_keyframes = st.sampled_from(["target", "offset"]).flatmap(lambda kind: st.lists(
    st.fixed_dictionaries({"frame": st.integers(1, 40), kind: valid_vec}), min_size=1, max_size=3))
valid_drag = st.one_of(
    st.fixed_dictionaries({"point": valid_vec, "keyframes": valid_keyframes},
                          optional={"radius": st.floats(0.01, 5), "end_frame": st.sampled_from([-1, 60])}),
    st.fixed_dictionaries({"handle": st.integers(0, 3), "keyframes": valid_keyframes},
                          optional={"start_frame": st.integers(1, 3), "comment": st.text(max_size=5)}))
valid_script = st.fixed_dictionaries({"drags": st.lists(valid_drag, min_size=1, max_size=3)})
corruption = st.one_of(json_junk, huge_int, st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -1, 0, True]))


@st.composite
def corrupted_script(draw):
    """A valid script with 1-3 edits: a value replaced (junk, huge integer, NaN/Inf), a key deleted or added."""
    doc = draw(valid_script)
    for _ in range(draw(st.integers(1, 3))):
        spots = []

        def walk(node):
            for key in (list(node) if isinstance(node, dict) else range(len(node))):
                spots.append((node, key))
                if isinstance(node[key], (dict, list)):
                    walk(node[key])

        walk(doc)
        if not spots:  # everything deleted
            break
        node, key = draw(st.sampled_from(spots))
        op = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        if op == "replace":
            node[key] = draw(corruption)
        elif op == "delete":
            del node[key]
        elif isinstance(node, dict):
            node[draw(st.sampled_from(["frame", "point", "handle", "radius", "target", "offset", "x"]))] = \
                draw(corruption)
        else:
            node.append(draw(corruption))
    return doc


@FUZZ
@given(doc=st.one_of(script, corrupted_script(), valid_script))
def test_motion_script_random_documents(fuzz_dir, doc):
    path = _write(fuzz_dir, "motion.json", json.dumps(doc, allow_nan=True).encode())
    ms = _try(MotionScript.load, path)
    if ms is not None:
        _check_script(ms)


@FUZZ_SMALL
@given(parts=st.lists(st.one_of(
    st.sampled_from(['{"drags": [', '{"point": [0, 0, ', '], "keyframes": [{"frame": ', ', "offset": [1, 2, 3]}]}',
                     "]}", "NaN", "Infinity", "-Infinity", "9" * 5000, "1e400", ",", "[", "{", '"', "\\u0000",
                     "\ud800"]),
    st.text(max_size=8)), max_size=10), encoding=st.sampled_from(["utf-8", "utf-16", "latin-1"]))
def test_motion_script_raw_text(fuzz_dir, parts, encoding):
    text = "".join(parts)
    raw = text.encode(encoding, errors="surrogatepass" if "utf" in encoding else "replace")
    path = _write(fuzz_dir, "raw.json", raw)
    ms = _try(MotionScript.load, path)
    if ms is not None:
        _check_script(ms)


def test_motion_script_huge_integers(fuzz_dir):
    """Regression: JSON integers too large for a float (or for Python's int parsing limit) are OptionErrors."""
    from physskin_gs.errors import OptionError

    kf = '"keyframes": [{"frame": 1, "offset": [0, 0, 0]}]'
    for doc in ('{"drags": [{"point": [0, 0, 1%s], %s}]}' % ("0" * 400, kf),
                '{"drags": [{"point": [0, 0, 0], "radius": 1%s, %s}]}' % ("0" * 400, kf),
                '{"drags": [{"point": [0, 0, 0], "keyframes": [{"frame": 1, "target": [0, 0, -1%s]}]}]}' % ("0" * 400),
                '{"drags": [{"handle": 0, "keyframes": [{"frame": %s, "offset": [0, 0, 0]}]}]}' % ("9" * 5000)):
        with pytest.raises(OptionError):
            MotionScript.load(_write(fuzz_dir, "huge.json", doc.encode()))
