"""Draws all-reduce bus bandwidth against message size from the CSV files of
`all_reduce_perf --csv` (MPI) and `gloo_all_reduce_perf --csv` (Gloo): one line per backend and
implementation, ours solid beside the raw library dashed, as nccl-tests' busbw column.

usage: python3 scripts/plot_all_reduce.py RESULTS.csv [MORE.csv ...] [-o all_reduce.png]
                                          [--placement in-place|out-of-place] [--title TEXT]
"""
import argparse
import csv
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plotting  # noqa: E402

COLUMNS = {"backend", "implementation", "processes", "size_bytes", "placement", "busbw_gbps"}


def size_label(size):
    for shift, suffix in ((30, "G"), (20, "M"), (10, "K")):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift}{suffix}"
    return str(size)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+")
    parser.add_argument("-o", "--output", default="all_reduce.png")
    parser.add_argument("--placement", default="in-place", choices=["in-place", "out-of-place"])
    parser.add_argument("--title", default=None)
    arguments = parser.parse_args()
    lines = {}
    processes = set()
    for path in arguments.results:
        with open(path, newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            missing = COLUMNS - set(reader.fieldnames or [])
            if missing:
                sys.exit(f"{path} lacks the columns {sorted(missing)}; is it from all_reduce_perf --csv?")
            for row in reader:
                if row["placement"] != arguments.placement:
                    continue
                key = (row["backend"], row["implementation"], row["processes"])
                lines.setdefault(key, []).append((int(row["size_bytes"]), float(row["busbw_gbps"])))
                processes.add(row["processes"])
    if not lines:
        sys.exit(f"no {arguments.placement} rows in {', '.join(arguments.results)}")
    plt = plotting.pyplot()
    figure, axis = plt.subplots(figsize=(7.5, 4.4))
    colours = {}
    several_counts = len(processes) > 1
    for (backend, implementation, count), points in sorted(lines.items()):
        points.sort()
        colour = colours.setdefault(backend, f"C{len(colours)}")
        ours = implementation.startswith("keras-cpp")
        axis.plot([p[0] for p in points], [p[1] for p in points], "-o" if ours else "--s",
                  color=colour, markersize=3.5, alpha=1.0 if ours else 0.75,
                  label=f"{backend}: {implementation}" + (f", {count} processes" if several_counts else ""))
    axis.set_xscale("log", base=2)
    sizes = sorted({size for points in lines.values() for size, _ in points})
    ticks = sizes[:: max(1, len(sizes) // 10)]
    axis.set_xticks(ticks)
    axis.set_xticklabels([size_label(size) for size in ticks])
    axis.set_xlabel("message size (bytes)")
    # Logarithmic: small messages are latency-bound and 100-1000x below the large ones, and the
    # gap between ours and the raw library there is what the plot is for.
    axis.set_yscale("log")
    axis.set_ylabel("bus bandwidth (GB/s, log scale)")
    axis.legend()
    axis.set_title(arguments.title or
                   f"all-reduce, {'/'.join(sorted(processes))} processes, {arguments.placement}")
    figure.tight_layout()
    figure.savefig(arguments.output)
    print(f"wrote {arguments.output}: {len(lines)} lines over {len(sizes)} sizes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
