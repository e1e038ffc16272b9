"""CPU: bench/ncu_compare.py's report parsing, labelling and command line
(the sample is ncu 2025's text report from the H200)."""
import pytest
from helpers import bench_script

nc = bench_script("ncu_compare")

SAMPLE = """==PROF== Connected to process 810 (/usr/bin/python3.12)
NCU-COMPARE-ORDER ["auto", "cluster=1x2", "cuBLAS"]
==PROF== Profiling "gemm_kernel" - 0: 0%....50%....100% - 9 passes
  gemm_kernel (128, 1, 1)x(384, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    Section: Command line profiler metrics
    -------------------------------------------------- ----------- ------------
    Metric Name                                        Metric Unit Metric Value
    -------------------------------------------------- ----------- ------------
    dram__bytes_read.sum                                     Mbyte        67.26
    dram__throughput.avg.pct_of_peak_sustained_elapsed           %        59.46
    gpu__time_duration.sum                                      us        24.38
    launch__grid_size                                                      128
    -------------------------------------------------- ----------- ------------
  gemm_kernel (128, 1, 1)x(384, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    Section: Command line profiler metrics
    Metric Name                                        Metric Unit Metric Value
    gpu__time_duration.sum                                      us     1,024.5
    lts__t_bytes.sum                                         Gbyte          n/a
  nvjet_sm90_qqtst_64x16_128x16_2x1_v_bz_algo2_TNT (2, 64, 1)x(384, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    Section: Command line profiler metrics
    gpu__time_duration.sum                                      us        22.18
  splitKreduce_kernel (64, 1, 1)x(256, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    gpu__time_duration.sum                                      us         2.10
"""


def test_parse_report_kernels_and_metrics():
    ks = nc.parse_report(SAMPLE)
    assert [k["kernel"] for k in ks] == ["gemm_kernel", "gemm_kernel",
                                         "nvjet_sm90_qqtst_64x16_128x16_2x1_v_bz_algo2_TNT", "splitKreduce_kernel"]
    assert ks[0]["grid"] == (128, 1, 1) and ks[0]["block"] == (384, 1, 1) and ks[2]["grid"] == (2, 64, 1)
    assert ks[0]["metrics"]["dram__bytes_read.sum"] == (67.26, "Mbyte")
    assert ks[0]["metrics"]["dram__throughput.avg.pct_of_peak_sustained_elapsed"] == (59.46, "%")
    assert ks[0]["metrics"]["launch__grid_size"] == (128.0, "")          # a metric without a unit
    assert ks[1]["metrics"]["gpu__time_duration.sum"] == (1024.5, "us")  # thousands separator
    assert ks[1]["metrics"]["lts__t_bytes.sum"] == (None, "Gbyte")
    assert "Metric" not in str(ks[0]["metrics"])                         # header lines are not metrics


def test_labels_and_table():
    ks = nc.parse_report(SAMPLE)
    labels = nc.label_kernels(ks, ["auto", "cluster=1x2", "cuBLAS"])
    assert labels == ["auto", "cluster=1x2", "cuBLAS", "cuBLAS"]       # every cuBLAS kernel labelled
    table = nc.format_rows(ks, labels, ["gpu__time_duration.sum", "lts__t_bytes.sum"])
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["variant", "kernel", "grid"] and len(lines) == 5
    assert "24.38 us" in lines[1] and "128x1x1" in lines[1]
    assert lines[2].rstrip().endswith("-")                               # n/a shown as "-"


def test_fp8_labels_and_arguments():
    ks = nc.parse_report(SAMPLE)
    assert nc.label_kernels(ks, ["auto", "block_n=128", "cuBLASLt"]) == ["auto", "block_n=128", "cuBLASLt",
                                                                          "cuBLASLt"]
    assert nc.label_kernels(ks, ["auto"]) == ["auto", "cuBLAS", "cuBLAS", "cuBLAS"]   # more kernels than variants
    args = nc.parse_args(["--shape", "128x8192x8192", "--dtype", "e4m3", "--variants", "auto,block_n=128",
                          "--cublas"])
    assert args.dtype == "e4m3" and args.layout == "TN" and args.cublas
    with pytest.raises(SystemExit):
        nc.parse_args(["--shape", "128x8192x8192", "--dtype", "e4m3", "--layout", "NN"])   # fp8 is TN only


def test_command_and_arguments(tmp_path):
    cmd = nc.ncu_command("/opt/ncu", ["a__b.sum", "c__d.avg"], ["--shape", "128x8192x8192"])
    assert cmd[:5] == ["/opt/ncu", "--profile-from-start", "off", "--metrics", "a__b.sum,c__d.avg"]
    assert cmd[6].endswith("ncu_compare.py") and cmd[7:] == ["--child", "--shape", "128x8192x8192"]
    args = nc.parse_args(["--shape", "128x8192x8192", "--variants", "auto,cluster=1x2:block_n=64", "--cublas"])
    assert (args.shape.m, args.shape.n, args.shape.k) == (128, 8192, 8192)
    assert args.variants[1] == ("cluster=1x2:block_n=64", {"_cluster": (1, 2), "_block_n": 64}) and args.cublas
    with pytest.raises(SystemExit):
        nc.parse_args(["--shape", "128x8192"])
    assert nc.main(["--shape", "64x64x64", "--ncu", str(tmp_path / "no-ncu")]) == 2   # not there: a clear exit
