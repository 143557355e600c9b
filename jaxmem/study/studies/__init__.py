"""One file per study, each defining its spec, presets and `AbstractStudy` and registering it in
`STUDIES` (the order here is the registry's: the order `jaxmem study --help` lists them and
`jaxmem report` writes them)."""

from . import demo, mechanism, peer, rank, scaling, sweep, tail  # noqa: F401  (each registers its study)
