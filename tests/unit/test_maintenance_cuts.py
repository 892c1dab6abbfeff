"""The clean-part rewrite selects only files wholly at or below the checkpoint (no dirty record is
re-dated): clean_rewrite_cuts, judged from Iceberg file metrics alone."""
from lakecleaner.core.datafiles import Bounds, DataFile
from lakecleaner.spark.maintenance import clean_rewrite_cuts


def FileBounds(p_lo, p_hi, o_lo, o_hi) -> DataFile:  # noqa: N802 - reads as the record it was
    return DataFile(size=1, offsets=Bounds(o_lo, o_hi), partitions=Bounds(p_lo, p_hi))


def _may_match(f: DataFile, cuts: dict, partitioned: bool) -> bool:
    """Iceberg's inclusive metrics evaluator on the rewrite's OR of (partition = p AND offset <= cut)."""
    p_lo, p_hi, o_lo = f.partitions.lower, f.partitions.upper, f.offsets.lower
    for p, cut in cuts.items():
        in_partition = not partitioned or p_lo is None or p_lo <= p <= p_hi
        if in_partition and (o_lo is None or o_lo <= cut):
            return True
    return False


def test_a_straddling_file_lowers_the_cut_below_its_first_offset():
    clean, straddling = FileBounds(None, None, 0, 3), FileBounds(None, None, 4, 9)
    cuts = clean_rewrite_cuts({None: 6}, [clean, straddling], partitioned=False)
    assert cuts == {None: 3}
    assert _may_match(clean, cuts, False) and not _may_match(straddling, cuts, False)


def test_only_the_partitions_a_dirty_file_may_hold_are_lowered():
    files = [FileBounds(0, 0, 0, 10), FileBounds(0, 0, 11, 30), FileBounds(1, 1, 0, 20), FileBounds(2, 2, 0, 5)]
    cuts = clean_rewrite_cuts({0: 20, 1: 20}, files, partitioned=True)
    assert cuts == {0: 10, 1: 20}  # partition 2 is unseen by the checkpoint: wholly dirty, matches no term
    assert [_may_match(f, cuts, True) for f in files] == [True, False, True, False]


def test_a_file_holding_several_partitions_is_clean_only_if_clean_in_each():
    mixed = FileBounds(0, 1, 5, 15)
    assert clean_rewrite_cuts({0: 20, 1: 15}, [mixed], True) == {0: 20, 1: 15}
    cuts = clean_rewrite_cuts({0: 20, 1: 10}, [mixed], True)
    assert cuts == {0: 4, 1: 4} and not _may_match(mixed, cuts, True)
    gap = FileBounds(0, 2, 5, 6)  # may hold partition 1, which the checkpoint has not seen
    assert clean_rewrite_cuts({0: 20, 2: 20}, [gap], True) == {0: 4, 2: 4}


def test_unknown_bounds_never_let_a_dirty_file_through():
    assert clean_rewrite_cuts({None: 6}, [FileBounds(None, None, None, 9)], False) is None
    unknown_partition = FileBounds(None, None, 3, 9)
    cuts = clean_rewrite_cuts({0: 6, 1: 6}, [unknown_partition], True)
    assert cuts == {0: 2, 1: 2} and not _may_match(unknown_partition, cuts, True)


def test_every_file_not_wholly_clean_is_left_out_on_generated_layouts():
    import random

    rng = random.Random(7)
    for _ in range(500):
        ckpt = {p: rng.randrange(0, 40) for p in range(3) if rng.random() < 0.8}
        files = []
        for _ in range(rng.randrange(1, 6)):
            lo_p = rng.randrange(0, 3)
            hi_p = lo_p if rng.random() < 0.7 else rng.randrange(lo_p, 3)
            lo = rng.randrange(0, 50)
            files.append(FileBounds(lo_p, hi_p, lo, lo + rng.randrange(0, 20)))
        cuts = clean_rewrite_cuts(ckpt, files, True)
        for f in files:
            wholly_clean = all(p in ckpt and f.offsets.upper <= ckpt[p] for p in range(f.partitions.lower,
                                                                                       f.partitions.upper + 1))
            assert wholly_clean or not _may_match(f, cuts, True), (ckpt, f, cuts)
