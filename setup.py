"""pip install of the ROS-free xinfer_ros library and its console scripts.

The ROS 2 build (interfaces, nodes, launch files) goes through CMakeLists.txt and
colcon; this file serves ``pip install -e .`` in a plain virtualenv.
"""

from setuptools import find_packages, setup

setup(
    name="xinfer_ros",
    version="0.1.0",
    description="SLO-aware serving of a VLA policy to a ROS 2 robot fleet (XInfer scheduler)",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["xinfer_ros", "xinfer_ros.*"]),
    include_package_data=True,
    install_requires=["numpy>=1.26", "pyyaml>=6.0", "matplotlib>=3.8", "tqdm>=4.66"],
    extras_require={
        # torch is left to the user on purpose: an unpinned torch pulls a CUDA build.
        "model": ["transformers>=5.24", "tokenizers>=0.20", "safetensors>=0.4",
                  "opencv-python-headless>=4.9"],
        "bags": ["rosbags>=0.10"],
        "openpi": ["websockets>=13", "msgpack>=1.0"],
        "test": ["pytest>=8.3", "pytest-timeout>=2.3", "hypothesis>=6.100"],
    },
    entry_points={
        "console_scripts": [
            "xinfer-bench = xinfer_ros.cli.bench:main",
            "xinfer-sim = xinfer_ros.cli.sim:main",
            "xinfer-calibrate = xinfer_ros.cli.calibrate:main",
            "xinfer-fleet = xinfer_ros.cli.fleet:main",
            "xinfer-record = xinfer_ros.cli.record:main",
            "xinfer-replay = xinfer_ros.cli.replay:main",
            "xinfer-serve = xinfer_ros.cli.serve:main",
            "xinfer-check-checkpoint = xinfer_ros.cli.check_checkpoint:main",
        ],
    },
)
