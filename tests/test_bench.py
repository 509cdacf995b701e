"""The benchmarks run end to end on small inputs and report consistent figures.

Speed is not asserted here (benchmarks measure it, tests do not); what is
checked is that every case runs, that the reported sizes match the codecs,
and that zfp's stream equals zfpy's.
"""
from __future__ import annotations

import io
import json
import math

import numpy as np
import pytest

from mpicomp.bench import accuracy, codecs, rate_distortion

pytestmark = pytest.mark.slow  # left out of make test-quick


def test_codec_benchmark_small():
    out, err = io.StringIO(), io.StringIO()
    rows = codecs.run(size_mib=1, repeat=1, out=out, err=err)
    names = {r["case"] for r in rows}
    assert {"zfp:4", "zfp:8", "zfp:16", "bitplane:8.25", "cast:bfloat16"} <= names
    for r in rows:
        assert r["enc_gbps"] > 0 and r["dec_gbps"] > 0, r
        assert math.isfinite(r["psnr_db"]), r
        if r["case"].startswith(("zfp:", "bitplane:")):
            assert r["bits_per_value"] <= float(r["case"].split(":")[1]), r
        if r["case"].startswith("zfp:"):
            assert r["zfpy_identical"] is True, r
    assert "zfp:8" in out.getvalue()
    assert err.getvalue(), "the benchmark reports progress on stderr"


def test_accuracy_benchmark_reports_psnr():
    rows = accuracy.run(n=1 << 16, data="gradient", out=io.StringIO(), err=io.StringIO())
    assert [r["rate"] for r in rows] == [4.25, 8.25, 16.25]
    for r in rows:
        for key in ("psnr_bitplane", "psnr_zfp1d", "psnr_zfp3d"):
            assert math.isfinite(r[key]) and r[key] > 0, r
    assert rows[0]["psnr_bitplane"] < rows[1]["psnr_bitplane"] < rows[2]["psnr_bitplane"]


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def test_rate_distortion_matches_bitplanes_psnr_with_errbound(tmp_path):
    """Every row: errbound (and SZ3 where pysz is installed) at or above bitplane's PSNR
    (the bisection's invariant), bits from the streams, speeds measured; the table printed
    with its command; the curves plotted."""
    from mpicomp.bench import sz3

    out = io.StringIO()
    plot = tmp_path / "rd.png"
    rows = rate_distortion.run(n=1 << 14, data="gradient,smooth", repeat=1, out=out,
                               err=io.StringIO(), argv=["rate-distortion"],
                               plot_path=str(plot) if _has("matplotlib") else None)
    assert [(r["data"], r["rate"]) for r in rows] == [
        (d, rate) for d in ("gradient", "smooth") for rate in rate_distortion.RATES]
    for r in rows:
        assert r["psnr_errbound"] >= r["psnr"], r
        assert 0 < r["bits_errbound"] < 33 and r["bits_bitplane"] == pytest.approx(r["rate"],
                                                                                 abs=0.01)
        assert r["ratio"] == pytest.approx(r["bits_errbound"] / r["bits_bitplane"])
        assert min(r["enc_errbound"], r["dec_errbound"], r["enc_bitplane"],
                   r["dec_bitplane"]) > 0, r
        if sz3.available():
            assert r["psnr_sz3"] >= r["psnr"] and 0 < r["bits_sz3"] < 40, r
            assert r["ratio_sz3"] == pytest.approx(r["bits_errbound"] / r["bits_sz3"])
            assert r["enc_x_sz3"] == pytest.approx(r["enc_errbound"] / r["enc_sz3"])
            assert r["dec_x_sz3"] == pytest.approx(r["dec_errbound"] / r["dec_sz3"])
        else:
            assert "bits_sz3" not in r
    if _has("matplotlib"):
        assert plot.stat().st_size > 10_000
    text = out.getvalue()
    assert "# command: " in text and text.count("\ngradient ") == 3, text


@pytest.mark.skipif(not _has("pysz") or not _has("zfpy"), reason="needs pysz and zfpy")
def test_field_rd_meets_sz3s_psnr_on_a_field(tmp_path):
    """Every row: shaped errbound at or above SZ3's PSNR (the bisection's invariant), bits
    from the streams, fewer than flat errbound's on a smooth field, speeds measured; the
    table printed with its command; JSON and curves written."""
    from mpicomp.bench import field_rd

    out = io.StringIO()
    plot, js = tmp_path / "f.png", tmp_path / "f.json"
    rows = field_rd.run(data="wave2d", side2=64, tolerances=(1e-2, 1e-4), repeat=1,
                        out=out, argv=["field-rd"],
                        plot_path=str(plot) if _has("matplotlib") else None,
                        json_path=str(js))
    assert [(r["data"], r["sz3_tolerance"]) for r in rows] == [("wave2d", 1e-2),
                                                               ("wave2d", 1e-4)]
    for r in rows:
        assert r["psnr_shaped"] >= r["psnr"], r
        assert 0 < r["bits_shaped"] < r["bits_flat"] < 33, r
        assert r["ratio"] == pytest.approx(r["bits_shaped"] / r["bits_sz3"])
        assert min(r["enc_1"], r["dec_1"], r["enc_n"], r["dec_n"], r["enc_sz3"]) > 0, r
    assert json.loads(js.read_text())[0]["shape"] == [64, 64]
    if _has("matplotlib"):
        assert plot.stat().st_size > 10_000
    assert "# command: " in out.getvalue()


@pytest.mark.skipif(not _has("pde"), reason="needs py-pde")
def test_gray_scott_fields_are_solved_patterns():
    """py-pde's Gray-Scott solve: the requested grid, finite, a pattern (not the flat
    initial state), the same bits for the same seed."""
    from mpicomp.bench.pde_fields import gray_scott

    a = gray_scott((24, 32), seed=1, t_end=200)
    assert a.shape == (24, 32) and a.dtype == np.float32 and np.isfinite(a).all()
    assert float(a.std()) > 0.01
    assert np.array_equal(a, gray_scott((24, 32), seed=1, t_end=200))
    with pytest.raises(ValueError, match="2 or 3 dimensions"):
        gray_scott((5, 5))


def test_errbound_case_specs():
    from mpicomp.bench.codecs import parse_case

    assert parse_case("errbound:1e-3")[1].get_config() == {
        "id": "errbound", "tolerance": 1e-3, "relative": False}
    assert parse_case("errbound:2e-4:rel")[1].get_config() == {
        "id": "errbound", "tolerance": 2e-4, "relative": True}
    with pytest.raises(ValueError, match="errbound:TOLERANCE"):
        parse_case("errbound:1e-3:abs")


def test_errbound_ab_compares_a_commits_kernels_with_the_tree():
    """HEAD's kernels/ imported beside the tree's: both write the same bytes here (the tree's
    kernels may only change speed), every speed measured, the table printed; a revision
    that is not one is refused by name."""
    from mpicomp.bench import errbound_ab

    out = io.StringIO()
    rows = errbound_ab.run(base="HEAD", n=1 << 14, data="gradient,smooth", repeat=1, out=out,
                           argv=["errbound-ab", "--n", "16384"])
    assert [r["data"] for r in rows] == ["gradient", "smooth"]
    for r in rows:
        assert r["same"] is True, r
        assert 0 < r["bits"] < 33, r
        assert min(r["enc_base"], r["enc_tree"], r["dec_base"], r["dec_tree"]) > 0, r
    assert "# command: python -m mpicomp.bench errbound-ab --n 16384" in out.getvalue()
    with pytest.raises(ValueError, match="--base must be a revision.*'no-such-revision'"):
        errbound_ab.run(base="no-such-revision", n=1 << 10, out=io.StringIO())
