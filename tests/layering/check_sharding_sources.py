"""Sharding lives in the tensors and ops, and the step context is the one reader of the global
distribution (docs/ARCHITECTURE.md, "Sharding at op dispatch" and "The life of a training step").

Checks, from the sources:
  1. ShardingContext::current() is called only by the step context (distribution/sharding/step_context.cpp);
     layers and rules read StepContext::sharding();
  2. the global distribution() is read in layers/ and training/ only where a variable's creation
     or a report needs it (READS_DISTRIBUTION), never per layer call (the trainer's batch shards
     read it in distribution/runtime/batch_shard.cpp, once per fit);
  3. no file of layers/ or training/ has a sharded path of its own (call_sharded) or calls a
     communicator, except the trainer's (TRAINING_AND_SAVING): a file added with either fails
     here.

usage: check_sharding_sources.py SOURCE_DIR
"""
import os
import re
import sys

READS_DISTRIBUTION = {
    "layers/variable_creation.cpp",   # a variable's layout, once at its creation
    "layers/layer.cpp",               # clear_session() resets it
    "training/model_summary.cpp",     # summary() and fit()'s plan warnings
}
# Where collectives belong besides redistribute(): the trainer's sums and the files' agreement.
TRAINING_AND_SAVING = {
    "training/trainer.cpp", "training/model.h", "training/model.cpp",
    "training/backup_and_restore.cpp", "training/model_summary.cpp",
}

CURRENT = re.compile(r"ShardingContext::current\(\)")
DISTRIBUTION_READ = re.compile(r"(?<![\w:])(?:distribution::)?distribution\(\)")
CALL_SHARDED = re.compile(r"\bcall_sharded\b")
COMMUNICATOR = re.compile(r"\b(?:all_reduce|all_gather|reduce_scatter|barrier|broadcast)\s*\(|\bworld\(\)|\bCommunicator\b")


def code_lines(path):
    """The file's lines with // comments removed (string contents are kept)."""
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            yield number, line.split("//", 1)[0]


def sources(source_dir, folders):
    for folder in folders:
        for root, _, files in os.walk(os.path.join(source_dir, folder)):
            for name in sorted(files):
                if name.endswith((".h", ".cpp", ".cu")):
                    path = os.path.join(root, name)
                    yield os.path.relpath(path, source_dir), path


def main():
    source_dir = sys.argv[1]
    problems = []
    for relative, path in sources(source_dir, ["engine", "distribution", "layers", "training", "saving", "io"]):
        for number, code in code_lines(path):
            where = f"{relative}:{number}"
            if CURRENT.search(code) and relative not in ("distribution/sharding/step_context.cpp",
                                                         "distribution/sharding/sharded_tensor.cpp",
                                                         "distribution/sharding/sharded_tensor.h"):
                problems.append(f"{where} calls ShardingContext::current(); read StepContext::sharding()")
            if not relative.startswith(("layers/", "training/")):
                continue
            if DISTRIBUTION_READ.search(code) and relative not in READS_DISTRIBUTION:
                problems.append(f"{where} reads the global distribution(); read the step context")
            if CALL_SHARDED.search(code):
                problems.append(f"{where} has a sharded path of its own; write the layer once, with ops")
            if COMMUNICATOR.search(code) and relative not in TRAINING_AND_SAVING:
                problems.append(f"{where} calls a communicator; collectives belong to redistribute() "
                                "and the rules")
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
