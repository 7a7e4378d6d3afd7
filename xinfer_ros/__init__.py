"""xinfer_ros: SLO-aware serving of a vision-language-action policy to a robot fleet.

The hand-written library (``core``, ``rtc``, ``sim``, ``model``, ``engine``) imports
without ROS. The ROS interfaces (``xinfer_ros.msg``, ``xinfer_ros.srv``) are generated
by ``colcon build`` into the installed copy of this package; ``__path__`` is extended
so that they import from either copy, whichever comes first on ``sys.path``.
"""

from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)

__version__ = "0.1.0"

__all__ = ["__version__"]
