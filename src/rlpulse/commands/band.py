"""``rlpulse band build``: a reference band from earlier healthy runs' logs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rlpulse.offline.logs import FORMATS


def register(sub: Any) -> None:
    """Add the ``band`` subcommand."""
    from rlpulse.detect.band import TOLERANCE

    p = sub.add_parser(
        "band",
        help="build a reference band from earlier healthy runs (runs are then compared with it)",
        description="Read finished healthy runs of one configuration (two or more; a log may "
        "hold several) and write the band their reward, KL, entropy and held-out scores spanned "
        "at each logged step. A run started with reference_band=FILE (or "
        "RLPULSE_REFERENCE_BAND, or rlpulse replay --reference-band) exports how far it is "
        "outside that band; RLOutsideReferenceBand warns when it is.",
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    b = verbs.add_parser("build", help="write the band of the runs in LOG...")
    b.add_argument("logs", nargs="+", type=Path, metavar="LOG", help="log file or run directory")
    b.add_argument("-o", "--out", type=Path, required=True, help="the band file to write (JSON)")
    b.add_argument("--format", choices=("auto", *FORMATS), default="auto")
    b.add_argument("--framework", help="key map searched first (default: from the format)")
    b.add_argument("--key-map", type=Path, help="YAML/JSON file of extra key mappings")
    b.add_argument(
        "--tolerance",
        type=float,
        default=TOLERANCE,
        help="share of the steps a healthy run may be ahead or behind (default %(default)g)",
    )
    b.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Build the band and say what it covers."""
    from rlpulse.keys import framework_name
    from rlpulse.offline import bands

    band = bands.build(
        args.logs,
        fmt=args.format,
        framework=framework_name(args.framework),
        key_map=args.key_map,
        tolerance=args.tolerance,
    )
    args.out.write_text(band.to_json() + "\n", encoding="utf-8")
    print(f"wrote {args.out}: the band of {len(band.runs)} runs ({', '.join(band.runs)})")
    for name, c in band.curves.items():
        print(f"  {name}: steps {c.steps[0]:g}..{c.steps[-1]:g}, {len(c.steps)} points")
    return 0
