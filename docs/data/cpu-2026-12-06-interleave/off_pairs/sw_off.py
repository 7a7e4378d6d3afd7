"""xinfer-bench with the saturation meter's band out of reach: the switch never batches."""
import sys

if __name__ == "__main__":
    from xinfer_ros.core import saturation
    saturation.SaturationSettings.__init__.__defaults__ = (2.0, 50.0, 49.0, 1.0)
    from xinfer_ros.cli.bench import main
    sys.exit(main())
