from backend.cluster.ray_compat import features, missing, parse_version


def test_versions_parse() -> None:
    assert parse_version("2.53.0") == (2, 53, 0)
    assert parse_version("2.54.0rc1") == (2, 54, 0)
    assert parse_version("nightly") == ()


def test_miles_pinned_ray_lacks_label_selector_only() -> None:
    names = {f.name for f in missing("2.53.0")}
    assert names == {"entrypoint_label_selector"}
    lost = next(f.lost for f in missing("2.53.0"))
    assert "prepare" in lost and "stacks" in lost
    assert missing("2.53.0")[0].text().startswith("entrypoint_label_selector")
    assert "needs Ray >= 2.54:" in missing("2.53.0")[0].text()


def test_test_cluster_ray_has_everything_and_old_ray_lacks_much() -> None:
    assert missing("2.60.0") == []
    assert {"token_auth", "entrypoint_label_selector", "entrypoint_num_cpus"} <= {
        f.name for f in missing("2.1.0")
    }
    assert missing("garbage") == []
    assert all(f.min for f in features())
