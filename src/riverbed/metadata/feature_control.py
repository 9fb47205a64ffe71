"""UpdateFeatures (api key 57): finalized feature levels as ``FeatureLevelRecord`` s, as
Kafka's ``FeatureControlManager.updateFeatures`` writes them.

Every update of a request is checked first, and the first that fails answers the whole
request (no record is written: Kafka's ``atomicOf``): INVALID_UPDATE_VERSION, "Invalid
update version V for feature F. <reason>", for a feature the controller does not know, a
level outside the range it supports, a level below 0, a lower level without a downgrade
upgrade type ("Can't downgrade the version of this feature without setting the upgrade
type to either safe or unsafe downgrade."), a higher one with one ("Can't downgrade to a
newer version."), an unknown upgrade type, and any metadata.version downgrade (Kafka
4.x refuses them: they might delete metadata). Level 0 removes a feature. v0's
``AllowDowngrade`` is a safe downgrade; ``ValidateOnly`` (v1+) checks and writes nothing.
Every riverbed node supports the same ranges (`SUPPORTED_FEATURES`), so the registered
brokers' ranges need no check of their own.
"""

from __future__ import annotations

from riverbed.metadata.control_common import ControllerBase, ControllerError, ControllerResult
from riverbed.metadata.image import MetadataImage
from riverbed.metadata.records import (
    METADATA_VERSION_FEATURE,
    METADATA_VERSION_LEVEL,
    TRANSACTION_VERSION_FEATURE,
    TRANSACTION_VERSION_LEVEL,
)
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    FeatureLevelRecord,
    UpdateFeaturesRequest,
    UpdateFeaturesResponse,
)

#: Feature -> the (min, max) level this node supports (ApiVersions' SupportedFeatures).
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {
    METADATA_VERSION_FEATURE: (1, METADATA_VERSION_LEVEL),
    TRANSACTION_VERSION_FEATURE: (0, TRANSACTION_VERSION_LEVEL),
}
#: FeatureUpdate.UpgradeType
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


def set_upgrade_types(request: UpdateFeaturesRequest, version: int) -> None:
    """A v0 request says ``AllowDowngrade`` (a safe downgrade), v1+ the upgrade type: the
    broker sets the v1+ field before passing a v0 request on (at the newest version)."""
    if version == 0:
        for u in request.feature_updates:
            u.upgrade_type = SAFE_DOWNGRADE if u.allow_downgrade else UPGRADE
            u.allow_downgrade = False  # v0 only: not written at the newest version


def _check(image: MetadataImage, feature: str, level: int, kind: int) -> None:
    def invalid(reason: str) -> ControllerError:
        message = f"Invalid update version {level} for feature {feature}. {reason}"
        return ControllerError(ErrorCode.INVALID_UPDATE_VERSION, message)

    if kind not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        raise invalid("The controller does not support the given upgrade type.")
    if level < 0:
        raise invalid("A feature version cannot be less than 0.")
    supported = SUPPORTED_FEATURES.get(feature)
    if supported is None:
        raise invalid("The controller does not support the given feature.")
    lo, hi = supported
    if not lo <= level <= hi:
        raise invalid(f"The controller only supports versions {lo}-{hi}.")
    current = image.features.get(feature, 0)
    if level < current and kind == UPGRADE:
        raise invalid(
            "Can't downgrade the version of this feature without setting the upgrade type "
            "to either safe or unsafe downgrade."
        )
    if level > current and kind != UPGRADE:
        raise invalid("Can't downgrade to a newer version.")
    if feature == METADATA_VERSION_FEATURE and level < current:
        raise invalid("Refusing to perform the requested downgrade: it might delete metadata.")


class FeatureControl(ControllerBase):
    def update_features(
        self, image: MetadataImage, request: UpdateFeaturesRequest
    ) -> ControllerResult:
        """``updateFeatures``: the records of every update, or none and the first error."""
        records: list[FeatureLevelRecord] = []
        R = UpdateFeaturesResponse
        try:
            for u in request.feature_updates:
                _check(image, u.feature, u.max_version_level, u.upgrade_type)
                if image.features.get(u.feature, 0) != u.max_version_level:
                    records.append(
                        FeatureLevelRecord(name=u.feature, feature_level=u.max_version_level)
                    )
        except ControllerError as err:
            return ControllerResult([], R(error_code=int(err.code), error_message=err.message))
        response = R(
            error_code=0,
            results=[R.UpdatableFeatureResult(feature=u.feature) for u in request.feature_updates],
        )
        return ControllerResult([] if request.validate_only else list(records), response)
