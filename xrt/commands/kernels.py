"""``xrt kernels``: the ops, their providers and whether each can run here; tuning spaces."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("kernels", help="list ops, providers and tuning spaces")
    ksub = p.add_subparsers(dest="kernels_command", metavar="ACTION")
    ls = ksub.add_parser("list", help="each op's providers and whether they run on this machine")
    ls.set_defaults(func=run_list)
    sp = ksub.add_parser("spaces", help="the tuning spaces and their defaults")
    sp.set_defaults(func=run_spaces)
    p.set_defaults(func=run_list)


def run_list(args: argparse.Namespace) -> int:
    import torch

    import xrt.pytorch as xp
    from xrt.device import default_device

    dev = default_device()
    x = torch.empty(16, device=dev.torch_device)
    print(f"device: {dev.summary()}")
    for op in ("square",):
        for name, prov in xp.ops.providers(op).items():
            why = prov.missing(x)
            print(f"{op:10} {name:7} {'ok' if why is None else 'unavailable: ' + why}")
    return 0


def run_spaces(args: argparse.Namespace) -> int:
    from xrt.kernels import spaces

    for key, space in sorted(spaces.SPACES.items()):
        n = len(list(spaces.configs(key)))
        print(f"{key}: {n} configs; default {spaces.default(key)}")
        for name, values in space.items():
            print(f"    {name}: {values}")
    return 0
