#!/usr/bin/env python3
"""Plots a `loom bench serve --sweep` report (its JSON) as a PNG.

Three panels against the offered request rate, each quantity on an axis of its
own unit: time to first token (ms), time per output token and inter-token
latency (ms), and throughput - output tokens/s on the left axis, achieved and
goodput requests/s on the right one. Offered rates are placed evenly and
labelled as given; "inf" (every request at once) is the last one, labelled so.

Draws with matplotlib (PyPI) when it is installed, else with gnuplot (Debian
package gnuplot-nox). Usage: plot_sweep.py REPORT.json OUT.png [--plotter matplotlib|gnuplot]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile


def load(path):
    with open(path) as f:
        report = json.load(f)
    runs = report.get("sweep")
    if not runs:
        sys.exit(f"plot_sweep: {path} has no 'sweep' (run loom bench serve --sweep)")
    title = report.get("label") or report.get("model") or "loom bench serve"
    labels = [("inf (all at once)" if str(r["request_rate"]) == "inf" else str(r["request_rate"]))
              for r in runs]

    def col(*keys):
        out = []
        for r in runs:
            v = r
            for k in keys:
                v = v[k]
            out.append(float(v))
        return out

    series = {
        "ttft_p50": col("ttft_ms", "p50"), "ttft_p99": col("ttft_ms", "p99"),
        "tpot_p50": col("tpot_ms", "p50"), "tpot_p99": col("tpot_ms", "p99"),
        "itl_p99": col("itl_ms", "p99"),
        "out_tok_s": col("output_tokens_per_s"), "req_s": col("requests_per_s"),
        "goodput_req_s": col("goodput", "requests_per_s"),
    }
    return title, labels, series


def plot_matplotlib(title, labels, s, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = list(range(len(labels)))
    fig, (ax_ttft, ax_tpot, ax_thr) = plt.subplots(1, 3, figsize=(16, 4.8), constrained_layout=True)
    fig.suptitle(title)
    for ax in (ax_ttft, ax_tpot, ax_thr):
        ax.set_xticks(x, labels)
        ax.set_xlabel("offered request rate (req/s)")
        ax.grid(True, alpha=0.3)
    ax_ttft.plot(x, s["ttft_p50"], "o-", label="TTFT p50")
    ax_ttft.plot(x, s["ttft_p99"], "s--", label="TTFT p99")
    ax_ttft.set_ylabel("time to first token (ms)")
    ax_ttft.set_ylim(bottom=0)
    ax_ttft.legend()
    ax_tpot.plot(x, s["tpot_p50"], "o-", label="TPOT p50")
    ax_tpot.plot(x, s["tpot_p99"], "s--", label="TPOT p99")
    ax_tpot.plot(x, s["itl_p99"], "^:", label="ITL p99")
    ax_tpot.set_ylabel("time per output token (ms)")
    ax_tpot.set_ylim(bottom=0)
    ax_tpot.legend()
    l1 = ax_thr.plot(x, s["out_tok_s"], "o-", color="tab:green", label="output tokens/s")
    ax_thr.set_ylabel("output tokens/s", color="tab:green")
    ax_thr.set_ylim(bottom=0)
    ax_req = ax_thr.twinx()
    l2 = ax_req.plot(x, s["req_s"], "s--", color="tab:purple", label="requests/s")
    l3 = ax_req.plot(x, s["goodput_req_s"], "^:", color="tab:brown", label="goodput requests/s")
    ax_req.set_ylabel("requests/s", color="tab:purple")
    ax_req.set_ylim(bottom=0)
    ax_thr.legend(l1 + l2 + l3, [line.get_label() for line in l1 + l2 + l3], loc="upper left")
    fig.savefig(out, dpi=100)


def plot_gnuplot(title, labels, s, out):
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "sweep.dat")
        with open(data, "w") as f:
            for i, label in enumerate(labels):
                row = [s[k][i] for k in ("ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "itl_p99",
                                         "out_tok_s", "req_s", "goodput_req_s")]
                f.write(f'{i} "{label}" ' + " ".join(f"{v:g}" for v in row) + "\n")
        esc = title.replace('"', "'")
        script = f"""
set terminal pngcairo size 1600,480 noenhanced
set output "{out}"
set multiplot layout 1,3 title "{esc}"
set grid
set xlabel "offered request rate (req/s)"
set yrange [0:*]
set key top left
set ylabel "time to first token (ms)"
plot "{data}" using 1:3:xtic(2) with linespoints title "TTFT p50", "" using 1:4 with linespoints title "TTFT p99"
set ylabel "time per output token (ms)"
plot "{data}" using 1:5:xtic(2) with linespoints title "TPOT p50", "" using 1:6 with linespoints title "TPOT p99", "" using 1:7 with linespoints title "ITL p99"
set ylabel "output tokens/s"
set y2label "requests/s"
set y2range [0:*]
set ytics nomirror
set y2tics
plot "{data}" using 1:8:xtic(2) axes x1y1 with linespoints title "output tokens/s", "" using 1:9 axes x1y2 with linespoints title "requests/s", "" using 1:10 axes x1y2 with linespoints title "goodput requests/s"
unset multiplot
"""
        subprocess.run(["gnuplot"], input=script, text=True, check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report")
    ap.add_argument("out")
    ap.add_argument("--plotter", choices=["matplotlib", "gnuplot"], default=None,
                    help="default: matplotlib when installed, else gnuplot")
    args = ap.parse_args()
    title, labels, series = load(args.report)
    plotter = args.plotter
    if plotter is None:
        try:
            import matplotlib  # noqa: F401
            plotter = "matplotlib"
        except ImportError:
            plotter = "gnuplot"
    if plotter == "gnuplot" and not shutil.which("gnuplot"):
        sys.exit("plot_sweep: neither matplotlib (pip install matplotlib) nor gnuplot "
                 "(apt-get install gnuplot-nox) is installed")
    (plot_matplotlib if plotter == "matplotlib" else plot_gnuplot)(title, labels, series, args.out)


if __name__ == "__main__":
    main()
