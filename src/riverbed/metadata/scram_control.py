"""SCRAM credentials in the metadata log: AlterUserScramCredentials (api 51, a controller
write) and DescribeUserScramCredentials (api 50, read from any image).

Kafka's ScramControlManager rules, in this order for each user of a request:
- a user named twice in one request (deletions and upsertions together):
  DUPLICATE_RESOURCE "A user credential cannot be altered twice in the same request";
- an empty name: UNACCEPTABLE_CREDENTIAL "Username must not be empty";
- a mechanism other than SCRAM-SHA-256 (1) / SCRAM-SHA-512 (2): UNSUPPORTED_SASL_MECHANISM;
- an upsertion below 4096 or above 16384 iterations: UNACCEPTABLE_CREDENTIAL "Too few
  iterations" / "Too many iterations";
- deleting a credential that does not exist: RESOURCE_NOT_FOUND.
An accepted upsertion becomes a UserScramCredentialRecord holding the salt, StoredKey =
H(HMAC(SaltedPassword, "Client Key")), ServerKey = HMAC(SaltedPassword, "Server Key") and
the iterations (the client sent the salted password, never the password); a deletion a
RemoveUserScramCredentialRecord. Users are independent: one's error leaves the others'
changes in the batch.
"""

from __future__ import annotations

from collections import Counter

from riverbed.metadata.control_common import ControllerBase, ControllerResult
from riverbed.metadata.image import MetadataImage
from riverbed.protocol.errors import ErrorCode
from riverbed.protocol.messages import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    Message,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from riverbed.security.scram_keys import (  # re-exported: bootstrap_file, tests
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SCRAM_HASHES,
    derive_keys,
)

AlterResult = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult
Upsertion = AlterUserScramCredentialsRequest.ScramCredentialUpsertion
Deletion = AlterUserScramCredentialsRequest.ScramCredentialDeletion


def _check(image: MetadataImage, item: Upsertion | Deletion) -> tuple[ErrorCode, str] | None:
    if not item.name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if item.mechanism not in SCRAM_HASHES:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if isinstance(item, Upsertion):
        if item.iterations < MIN_ITERATIONS:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
        if item.iterations > MAX_ITERATIONS:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
        return None
    if (item.name, item.mechanism) not in image.scram_credentials:
        return (
            ErrorCode.RESOURCE_NOT_FOUND,
            "Attempt to delete a user credential that does not exist",
        )
    return None


def upsertion_record(item: Upsertion) -> UserScramCredentialRecord:
    stored, server = derive_keys(item.mechanism, bytes(item.salted_password))
    return UserScramCredentialRecord(
        name=item.name,
        mechanism=item.mechanism,
        salt=bytes(item.salt),
        stored_key=stored,
        server_key=server,
        iterations=item.iterations,
    )


class ScramControl(ControllerBase):
    def alter_user_scram_credentials(
        self, image: MetadataImage, request: AlterUserScramCredentialsRequest, now_ms: int
    ) -> ControllerResult:
        del now_ms
        items: list[Upsertion | Deletion] = [*request.deletions, *request.upsertions]
        counts = Counter(item.name for item in items)
        records: list[Message] = []
        results: dict[str, AlterResult] = {}
        for item in items:
            if item.name in results:
                continue
            error = (
                (
                    ErrorCode.DUPLICATE_RESOURCE,
                    "A user credential cannot be altered twice in the same request",
                )
                if counts[item.name] > 1
                else _check(image, item)
            )
            if error is not None:
                results[item.name] = AlterResult(
                    user=item.name, error_code=int(error[0]), error_message=error[1]
                )
                continue
            if isinstance(item, Upsertion):
                records.append(upsertion_record(item))
            else:
                records.append(
                    RemoveUserScramCredentialRecord(name=item.name, mechanism=item.mechanism)
                )
            results[item.name] = AlterResult(user=item.name, error_code=0)
        response = AlterUserScramCredentialsResponse(results=list(results.values()))
        return ControllerResult(records, response)


def describe_user_scram_credentials(
    image: MetadataImage, request: DescribeUserScramCredentialsRequest
) -> DescribeUserScramCredentialsResponse:
    """Iterations per mechanism of each user (all users when none is named)."""
    R = DescribeUserScramCredentialsResponse
    by_user: dict[str, list[DescribeUserScramCredentialsResponse.CredentialInfo]] = {}
    for (user, mechanism), cred in sorted(image.scram_credentials.items()):
        by_user.setdefault(user, []).append(
            R.CredentialInfo(mechanism=mechanism, iterations=cred.iterations)
        )
    names = [u.name for u in request.users] if request.users else sorted(by_user)
    counts = Counter(names)
    results = []
    for name in dict.fromkeys(names):
        if counts[name] > 1:
            code, message = (
                ErrorCode.DUPLICATE_RESOURCE,
                "Cannot describe SCRAM credentials for the same user twice in a single request",
            )
        elif name not in by_user:
            code, message = (
                ErrorCode.RESOURCE_NOT_FOUND,
                "Attempt to describe a user credential that does not exist",
            )
        else:
            results.append(
                R.DescribeUserScramCredentialsResult(
                    user=name, error_code=0, credential_infos=by_user[name]
                )
            )
            continue
        results.append(
            R.DescribeUserScramCredentialsResult(
                user=name, error_code=int(code), error_message=message, credential_infos=[]
            )
        )
    return R(error_code=0, results=results)
