"""Draws a CSVLogger file (one row per epoch, Keras' columns) as a PNG: one panel per metric,
the training curve beside its validation twin, and the learning rate when it was logged.

usage: python3 scripts/plot_history.py HISTORY.csv [-o history.png] [--title TEXT]
"""
import argparse
import csv
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plotting  # noqa: E402


def read_history(path):
    """({column: [float or None]}, epochs) from a CSVLogger file of any one-character separator."""
    with open(path, newline="", encoding="utf-8") as handle:
        text = handle.read()
    if not text.strip():
        sys.exit(f"{path} is empty: no epoch has ended yet")
    try:
        dialect = csv.Sniffer().sniff(text.splitlines()[0], delimiters=",;\t| ")
    except csv.Error:
        sys.exit(f"{path} is not a CSVLogger file: its header has no separator")
    rows = list(csv.DictReader(text.splitlines(), dialect=dialect))
    if not rows or "epoch" not in rows[0]:
        sys.exit(f"{path} is not a CSVLogger file: it has no 'epoch' column")
    # A run resumed by BackupAndRestore appends to the file and may repeat the epoch it was
    # killed in (or a whole history, when a finished run is started again): the last row of
    # each epoch is the one that counted.
    last_of_epoch = {}
    for row in rows:
        try:
            last_of_epoch[int(row["epoch"])] = row
        except (TypeError, ValueError):
            sys.exit(f"{path}: epoch {row.get('epoch')!r} is not an integer")
    rows = [last_of_epoch[epoch] for epoch in sorted(last_of_epoch)]
    columns = {}
    for name in rows[0]:
        if name == "epoch":
            continue
        values = []
        for row in rows:
            value = row.get(name)
            try:
                number = float(value)
                values.append(number if math.isfinite(number) else None)
            except (TypeError, ValueError):  # "NA": this epoch did not have it
                values.append(None)
        columns[name] = values
    # Epochs are 0-based in the file (as Keras writes them); the axis counts from 1.
    epochs = [int(row["epoch"]) + 1 for row in rows]
    return columns, epochs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("history")
    parser.add_argument("-o", "--output", default="history.png")
    parser.add_argument("--title", default=None)
    arguments = parser.parse_args()
    columns, epochs = read_history(arguments.history)
    metrics = [name for name in columns if not name.startswith("val_") and name != "learning_rate"]
    metrics.sort(key=lambda name: (name != "loss", name))  # loss first
    panels = metrics + (["learning_rate"] if "learning_rate" in columns else [])
    if not panels:
        sys.exit(f"{arguments.history} has no metric columns")
    plt = plotting.pyplot()
    figure, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.6), squeeze=False)
    for axis, name in zip(axes[0], panels):
        for column, label, style in ((name, "training", "-o"), ("val_" + name, "validation", "-s")):
            points = [(e, v) for e, v in zip(epochs, columns.get(column, [])) if v is not None]
            if points:
                axis.plot([p[0] for p in points], [p[1] for p in points], style, markersize=3.5,
                          label=label if name != "learning_rate" else None)
        axis.set_title(name.replace("_", " "))
        axis.set_xlabel("epoch")
        if name == "learning_rate":
            axis.set_yscale("log")
        elif axis.get_legend_handles_labels()[0]:
            axis.legend()
    figure.suptitle(arguments.title or os.path.basename(arguments.history))
    figure.tight_layout()
    figure.savefig(arguments.output)
    print(f"wrote {arguments.output}: {', '.join(panels)} over {len(set(epochs))} epochs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
