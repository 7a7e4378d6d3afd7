"""Drive the endpoint with the REAL PyPI openpi client (runs in .venv-openpi, numpy<2).

Usage: python openpi_client_script.py '<json config>'; prints one JSON line, a list
with one result per client. Config keys: ``port``, ``requests``, ``api_key`` and
``clients``: list of ``{"robot_id": str | None, "path": bool, "layout": "libero" |
"aloha", "malformed_at": int | None, "budget_ms": float | None}``.
"""

import json
import sys
import threading

import numpy as np
from openpi_client import websocket_client_policy


def observation(layout, k, client):
    rng = np.random.default_rng(k)
    if layout == "libero":
        obs = {"observation/image": rng.integers(0, 256, (224, 224, 3), dtype=np.uint8),
               "observation/wrist_image": rng.integers(0, 256, (224, 224, 3), dtype=np.uint8),
               "observation/state": rng.uniform(-1, 1, 8),
               "prompt": "pick up the black bowl"}
    else:
        obs = {"images": {"cam_high": rng.integers(0, 256, (3, 224, 224), dtype=np.uint8),
                          "cam_left_wrist": rng.integers(0, 256, (3, 224, 224), dtype=np.uint8)},
               "state": rng.uniform(-1, 1, 14).astype(np.float32),
               "prompt": "fold the towel"}
    if client.get("robot_id") and not client.get("path"):
        obs["xinfer/robot_id"] = client["robot_id"]
    if client.get("budget_ms"):
        obs["xinfer/budget_ms"] = client["budget_ms"]
    return obs


def run(index, cfg, client, barrier, results):
    out = {"shapes": [], "errors": [], "robot_ids": [], "timing": [], "dtypes": []}
    try:
        if client.get("path"):
            policy = websocket_client_policy.WebsocketClientPolicy(
                host=f"ws://127.0.0.1:{cfg['port']}/{client['robot_id']}",
                api_key=cfg.get("api_key"))
        else:
            policy = websocket_client_policy.WebsocketClientPolicy(
                host="127.0.0.1", port=cfg["port"], api_key=cfg.get("api_key"))
        out["metadata"] = {k: v for k, v in policy.get_server_metadata().items()
                           if isinstance(v, (str, int, float, bool, list, dict, type(None)))}
        barrier.wait(timeout=30)
        for k in range(cfg["requests"]):
            obs = observation(client.get("layout", "libero"), k, client)
            if client.get("malformed_at") == k:
                obs["observation/state"] = "not a vector"
            try:
                reply = policy.infer(obs)
            except RuntimeError as exc:
                out["errors"].append(str(exc))
                continue
            out["shapes"].append(list(reply["actions"].shape))
            out["dtypes"].append(reply["actions"].dtype.str)
            out["robot_ids"].append(reply["xinfer/robot_id"])
            out["timing"].append(sorted(reply["server_timing"]))
    except Exception as exc:  # reported to the test, which fails with it
        out["fatal"] = f"{type(exc).__name__}: {exc}"
        barrier.abort()
    results[index] = out


def main():
    cfg = json.loads(sys.argv[1])
    clients = cfg["clients"]
    barrier = threading.Barrier(len(clients))
    results = [None] * len(clients)
    threads = [threading.Thread(target=run, args=(i, cfg, c, barrier, results))
               for i, c in enumerate(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
