from backend.signals.clock import seconds_from_ms


def test_ray_milliseconds_become_seconds_and_unset_stays_unset() -> None:
    assert seconds_from_ms(1_772_445_605_311) == 1_772_445_605.311
    assert seconds_from_ms(1500) == 1.5  # small values are still milliseconds: the unit comes from the source
    assert seconds_from_ms(0) is None and seconds_from_ms(None) is None
