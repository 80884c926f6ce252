"""BDD100K's lane-marking F-score and drivable mIoU (perception.metrics.bdd100k) on hand-made cases."""

from __future__ import annotations

import numpy as np
import pytest

from perception.metrics.bdd100k import boundary_fscore, disk, lane_fscores, mean_lane_fscores, rasterise_lanes
from perception.metrics.segmentation import BinaryIoU

SIZE = (100, 60)  # width, height


def test_disk_is_scikit_image_disk():
    # skimage.morphology.disk(1) and disk(2), written out
    assert disk(1).tolist() == [[0, 1, 0], [1, 1, 1], [0, 1, 0]]
    assert disk(2).tolist() == [[0, 0, 1, 0, 0], [0, 1, 1, 1, 0], [1, 1, 1, 1, 1], [0, 1, 1, 1, 0], [0, 0, 1, 0, 0]]


def test_empty_masks_follow_the_toolkit_conventions():
    empty, line = np.zeros((60, 100), bool), rasterise_lanes([np.array([[10, 50], [10, 10]])], SIZE)
    assert boundary_fscore(empty, empty, 1) == 1.0  # nothing labelled, nothing predicted
    assert boundary_fscore(line, empty, 5) == 0.0  # missed
    assert boundary_fscore(empty, line, 5) == 0.0  # false positive


def test_a_shifted_lane_counts_from_the_bound_equal_to_its_offset():
    truth = [np.array([[20.0, 55.0], [20.0, 5.0]])]  # a vertical lane, 51 px long
    shifted = [np.array([[22.0, 55.0], [22.0, 5.0]])]  # 2 px to the right
    assert lane_fscores(truth, truth, SIZE) == (1.0, 1.0, 1.0)
    assert lane_fscores(shifted, truth, SIZE) == (0.0, 1.0, 1.0)  # within 2 px, not within 1 px


def test_half_a_lane_predicted_gives_recall_one_half():
    truth = [np.array([[50.0, 59.0], [50.0, 0.0]])]  # 60 px
    half = [np.array([[50.0, 59.0], [50.0, 30.0]])]  # its lower 30 px
    precision, recall = 1.0, 30 / 60
    expected = 2 * precision * recall / (precision + recall)
    assert lane_fscores(half, truth, SIZE)[0] == pytest.approx(expected, abs=0.02)


def test_frames_are_averaged_not_pixels():
    # one perfect frame and one missed frame: the toolkit averages per frame -> 0.5 whatever the lane lengths
    assert mean_lane_fscores([(1.0, 1.0, 1.0), (0.0, 0.0, 0.0)]) == {"F1_pix1": 0.5, "F1_pix2": 0.5, "F1_pix5": 0.5}


def test_drivable_miou_is_the_mean_of_both_class_ious_of_the_toolkits_confusion_matrix():
    rng = np.random.default_rng(0)
    truth = rng.integers(0, 3, size=(40, 50))  # BDD100K mask values: 0 direct, 1 alternative, 2 background
    truth[:5] = 255  # ignored
    prediction = rng.random((40, 50)) < 0.6  # drivable or not
    binary_truth = np.where(truth == 255, 255, (truth < 2).astype(np.int64))
    iou = BinaryIoU()
    iou.update(prediction, binary_truth)
    # the toolkit's way: a confusion matrix over valid pixels (bincount), per-class IoU, mean over classes
    valid = binary_truth != 255
    hist = np.bincount(2 * binary_truth[valid] + prediction[valid].astype(int), minlength=4).reshape(2, 2)
    per_class = np.diag(hist) / (hist.sum(0) + hist.sum(1) - np.diag(hist))
    assert iou.compute()["mIoU"] == pytest.approx(per_class.mean())
