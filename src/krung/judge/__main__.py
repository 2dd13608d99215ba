"""`python -m krung.judge ARGS`: a judge process (krung.judge.serve, whose arguments these
are). Where its worker is forked (KRUNG_FORK_WORKER), the zygotes of its worker and of the
artifacts rung's build process are forked here first, before any module of the judge is
imported (krung.worker.zygote)."""

import argparse
import sys

from krung.protocol.errors import UsageError
from krung.protocol.settings import Settings
from krung.worker import zygote


def main() -> None:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--device", default="auto")
    known, _ = parser.parse_known_args()
    try:
        mode = Settings.from_env().fork_worker
    except UsageError:  # the caller checked the settings; a judge fails on them later
        mode = "off"
    forked = None
    if zygote.wanted(mode, known.device):
        forked = zygote.fork()
        zygote.keep(zygote.fork("build"))  # the artifacts rung's, if it runs
    from krung.judge.serve import main as serve

    serve(sys.argv[1:], forked)


if __name__ == "__main__":
    main()
