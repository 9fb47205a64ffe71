"""UpdateFeatures on the controller (Kafka's FeatureControlManager.updateFeatures): records
only when every update is valid, only replay changes the image."""

from __future__ import annotations

from riverbed.metadata.feature_control import (
    SAFE_DOWNGRADE,
    UNSAFE_DOWNGRADE,
    UPGRADE,
    set_upgrade_types,
)
from riverbed.metadata.image import replay_all
from riverbed.metadata.records import (
    METADATA_VERSION_FEATURE,
    METADATA_VERSION_LEVEL,
    TRANSACTION_VERSION_FEATURE,
)
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import UpdateFeaturesRequest

from .conftest import cluster_image, make_controller

U = UpdateFeaturesRequest
TV = TRANSACTION_VERSION_FEATURE


def _update(*updates: tuple[str, int, int], validate_only: bool = False) -> UpdateFeaturesRequest:
    return U(
        feature_updates=[
            U.FeatureUpdateKey(feature=f, max_version_level=level, upgrade_type=kind)
            for f, level, kind in updates
        ],
        validate_only=validate_only,
    )


def test_transaction_version_down_and_up() -> None:
    c = make_controller()
    image = cluster_image(c, brokers=1)
    assert image.features[TV] == 2
    res = c.update_features(image, _update((TV, 1, SAFE_DOWNGRADE)))
    assert res.response.error_code == 0 and [r.feature for r in res.response.results] == [TV]
    assert image.features[TV] == 2  # only replay changes the image
    image = replay_all(image, res.records)
    assert image.features[TV] == 1
    res = c.update_features(image, _update((TV, 0, UNSAFE_DOWNGRADE)))
    image = replay_all(image, res.records)
    assert TV not in image.features  # level 0 removes the feature
    res = c.update_features(image, _update((TV, 2, UPGRADE), validate_only=True))
    assert res.response.error_code == 0 and res.records == []
    image = replay_all(image, c.update_features(image, _update((TV, 2, UPGRADE))).records)
    assert image.features[TV] == 2
    # already at the level: nothing to write
    assert c.update_features(image, _update((TV, 2, UPGRADE))).records == []


def test_invalid_updates_write_nothing() -> None:
    c = make_controller()
    image = cluster_image(c, brokers=1)
    cases = {
        (TV, 1, UPGRADE): "Can't downgrade the version of this feature without setting the "
        "upgrade type to either safe or unsafe downgrade.",
        (TV, 3, UPGRADE): "The controller only supports versions 0-2.",
        (TV, -1, SAFE_DOWNGRADE): "A feature version cannot be less than 0.",
        ("nope.version", 1, UPGRADE): "The controller does not support the given feature.",
        (TV, 1, 9): "The controller does not support the given upgrade type.",
        (METADATA_VERSION_FEATURE, METADATA_VERSION_LEVEL - 1, UNSAFE_DOWNGRADE): (
            "Refusing to perform the requested downgrade: it might delete metadata."
        ),
    }
    for (feature, level, kind), reason in cases.items():
        # a valid update alongside: the request is all or nothing
        res = c.update_features(image, _update((TV, 2, UPGRADE), (feature, level, kind)))
        assert res.records == [], feature
        assert res.response.error_code == ErrorCode.INVALID_UPDATE_VERSION
        assert res.response.error_message == (
            f"Invalid update version {level} for feature {feature}. {reason}"
        )
    image = replay_all(image, c.update_features(image, _update((TV, 1, SAFE_DOWNGRADE))).records)
    res = c.update_features(image, _update((TV, 2, SAFE_DOWNGRADE)))
    assert res.response.error_message.endswith("Can't downgrade to a newer version.")


def test_v0_allow_downgrade_is_a_safe_downgrade() -> None:
    req = U(
        feature_updates=[U.FeatureUpdateKey(feature=TV, max_version_level=1, allow_downgrade=True)]
    )
    set_upgrade_types(req, 0)
    assert req.feature_updates[0].upgrade_type == SAFE_DOWNGRADE
    assert req.feature_updates[0].allow_downgrade is False  # passed on at v2, without it
    set_upgrade_types(req, 0)
    assert req.feature_updates[0].upgrade_type == UPGRADE
    req.feature_updates[0].upgrade_type = UNSAFE_DOWNGRADE
    set_upgrade_types(req, 1)  # v1+ says it itself
    assert req.feature_updates[0].upgrade_type == UNSAFE_DOWNGRADE
