"""xinfer-bench with the saturation meter's band moved: ENTER and LEAVE from the environment.

The switch's band (core.saturation.SaturationSettings, enter 0.92 / leave 0.88) was
fitted on runs without phase spreading; this runs it with another band, e.g.
ENTER=1.10 LEAVE=1.05 python sw_band.py engine ... --policy xinfer_batch_switch
"""
import os
import sys

if __name__ == "__main__":
    from xinfer_ros.core import saturation
    window, _, _, dwell = saturation.SaturationSettings.__init__.__defaults__
    saturation.SaturationSettings.__init__.__defaults__ = (
        window, float(os.environ["ENTER"]), float(os.environ["LEAVE"]), dwell)
    from xinfer_ros.cli.bench import main
    sys.exit(main())
