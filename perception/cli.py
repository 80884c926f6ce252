"""The ``perception`` console command: one entry point for the tools (``perception --help``).

Each sub-command runs the same ``main(args)`` as the matching ``tools/*.py`` script (both live in
``perception/commands/``), so ``perception train CONFIG`` and ``python tools/train.py CONFIG``
are the same run. Sub-command modules are imported only when chosen: ``--help`` stays instant.
"""

from __future__ import annotations

import importlib
import sys

# name -> (module under perception.commands, one line for --help)
COMMANDS = {
    "train": ("train", "train a config with Lightning (one GPU, torchrun, SLURM; --resume)"),
    "test": ("test", "evaluate a checkpoint or an ONNX model on a split: metrics.json, --report HTML"),
    "export": ("export_onnx", "export a checkpoint to TensorRT-ready ONNX with a sidecar and deployment checks"),
    "demo": ("demo", "draw every task's predictions on images, a video or a nuScenes sample"),
    "make-synthetic": (None, "write a synthetic dataset in a real format: 'nuscenes' or 'bdd100k' DIR ..."),
    "build-label-cache": ("build_label_cache", "build or rebuild the label cache of a config's splits"),
}
SYNTHETIC = {"nuscenes": "make_synthetic_nuscenes", "bdd100k": "make_synthetic_bdd100k"}


def usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = ["usage: perception COMMAND [ARGS ...]   (perception COMMAND --help for its options)", "",
             "multi-task camera perception: train, evaluate, export and draw", "", "commands:"]
    lines += [f"  {name:<{width}}  {text}" for name, (_, text) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"perception: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module_name, _ = COMMANDS[name]
    prog = f"perception {name}"
    if name == "make-synthetic":
        if not rest or rest[0] not in SYNTHETIC:
            if rest and rest[0] in ("-h", "--help"):
                print(f"usage: {prog} {{{','.join(SYNTHETIC)}}} DIR [options]   ({prog} nuscenes --help)")
                return 0
            print(f"usage: {prog} {{{','.join(SYNTHETIC)}}} DIR [options]: name the format first", file=sys.stderr)
            return 2
        module_name, prog, rest = SYNTHETIC[rest[0]], f"{prog} {rest[0]}", rest[1:]
    from perception.commands import run_command

    return run_command(importlib.import_module(f"perception.commands.{module_name}"), rest, prog)


if __name__ == "__main__":
    sys.exit(main())
