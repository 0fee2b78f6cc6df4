

def test_two_runs_started_in_the_same_second_get_two_folders(tmp_path, monkeypatch):
    """Two explore controls started together once shared one results folder (and so
    one run folder): claim_dir hands each its own."""
    import threading
    from suite import paths
    monkeypatch.setenv("OZFS_VMCI_RESULTS", str(tmp_path))
    got: list = []
    ts = [threading.Thread(target=lambda: got.append(paths.claim_dir(tmp_path, "explore-x")))
          for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(set(got)) == 8 and all(d.is_dir() for d in got)
    assert {d.name for d in got} == {"explore-x"} | {f"explore-x-{n}" for n in range(2, 9)}
    assert paths.stamped("gate").parent == tmp_path
