"""Programs to run as ranks of a world: ``accio run -n 4 python3 -m accio.demo.world``."""
