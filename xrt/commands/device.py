"""``xrt device``: the devices xrt sees, as one line each or as JSON."""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("device", help="show the devices xrt sees and their facts")
    p.add_argument("--json", action="store_true", help="print every fact as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from xrt.device import discover

    devices = discover()
    if args.json:
        print(json.dumps([d.as_dict() for d in devices], indent=1))
    else:
        for d in devices:
            print(d.summary())
    return 0
