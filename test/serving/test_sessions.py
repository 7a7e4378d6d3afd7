"""One requester per robot (ROS-free)."""

from xinfer_ros.serving.sessions import RequestSessions


def test_one_session_per_robot_until_it_falls_silent() -> None:
    # admit(robot, session id, header stamp (ns), arrival (s))
    s = RequestSessions(expiry_s=0.5)
    assert s.admit("r1", "a", 1, 0.0) == ""
    assert s.admit("r2", "b", 7, 0.0) == ""  # robots are independent
    assert "second requester" in s.admit("r1", "x", 2, 0.1)
    assert "repeats or precedes" in s.admit("r1", "a", 1, 0.1)  # the same message again
    assert s.admit("r1", "a", 3, 0.2) == ""  # gaps are fine (keep-last-1 drops some)
    # Refused requests do not keep the session alive, accepted ones do.
    assert "second requester" in s.admit("r1", "x", 4, 0.65)
    assert s.admit("r1", "x", 1, 0.71) == ""  # "a" silent > 0.5 s: the new session
    assert s.refused == {"r1": 3}
    s.forget("r1")
    assert s.admit("r1", "a", 1, 0.72) == ""
