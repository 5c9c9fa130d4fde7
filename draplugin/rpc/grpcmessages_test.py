"""The hand-written messages against protobuf's generated modules, both ways: what the plugin
answers parses to the same message, what the kubelet sends decodes to the same values."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from draplugin.rpc import grpcmessages as msg
from libdisplay.proto import wire

REG = wire.REGISTRATION
HEALTH = wire.HEALTH_V1ALPHA1
DRA = pytest.mark.parametrize("module", [wire.DRA_V1, wire.DRA_V1BETA1], ids=["v1", "v1beta1"])

text = st.text(max_size=40)
claims = st.lists(st.builds(msg.Claim, namespace=text, uid=text, name=text), max_size=4)


def test_the_services_are_those_of_the_wire_module() -> None:
    assert (msg.REGISTRATION_SERVICE, msg.HEALTH_V1ALPHA1_SERVICE) == (
        wire.REGISTRATION_SERVICE, wire.HEALTH_V1ALPHA1_SERVICE)
    assert set(msg.DRA_SERVICES) == set(wire.DRA_VERSIONS)
    assert msg.SUPPORTED_VERSIONS == wire.SUPPORTED_VERSIONS
    assert msg.PLUGIN_TYPE == wire.PLUGIN_TYPE
    assert msg.method("a.B", "C") == wire.method("a.B", "C")


@DRA
@given(sent=claims)
def test_claims_decode_as_the_kubelet_encoded_them(module: Any, sent: list[msg.Claim]) -> None:
    for request_type in (module.NodePrepareResourcesRequest, module.NodeUnprepareResourcesRequest):
        data = request_type(claims=[module.Claim(namespace=c.namespace, uid=c.uid, name=c.name)
                                    for c in sent]).SerializeToString()
        assert msg.decode_claims(data) == sent


def test_registration_status_and_empty_requests_decode() -> None:
    status = REG.RegistrationStatus(plugin_registered=True, error="é").SerializeToString()
    assert msg.decode_registration_status(status) == msg.RegistrationStatus(True, "é")
    assert msg.decode_registration_status(b"") == msg.RegistrationStatus(False, "")
    msg.decode_empty(REG.InfoRequest().SerializeToString())
    msg.decode_empty(HEALTH.NodeWatchResourcesRequest().SerializeToString())


def test_unknown_fields_are_skipped_as_protobuf_skips_them() -> None:
    # A newer kubelet's Claim with a field 9 of each wire type this version does not know.
    claim = (b"\x12\x01u"  # uid = "u"
             b"\x48\x96\x01"  # 9: varint
             b"\x49" + bytes(8)  # 9: fixed64
             + b"\x4a\x02ab"  # 9: bytes
             + b"\x4d" + bytes(4))  # 9: fixed32
    data = b"\x0a" + bytes([len(claim)]) + claim
    assert msg.decode_claims(data) == [msg.Claim(namespace="", uid="u", name="")]
    assert [c.uid for c in wire.DRA_V1.NodePrepareResourcesRequest.FromString(data).claims] == [
        "u"]


@pytest.mark.parametrize("data", [b"\x0a\x05ab", b"\x0a", b"\x08" + b"\xff" * 11, b"\x00\x00",
                                  b"\x0b", b"\x08\x01", b"\x0a\x02\x12\x05"])
def test_bytes_that_are_no_claims_list_raise_message_error(data: bytes) -> None:
    with pytest.raises(msg.MessageError):
        msg.decode_claims(data)


def test_plugin_info_parses_as_protobufs() -> None:
    data = msg.plugin_info(type_=msg.PLUGIN_TYPE, name="display.liken.sh",
                           endpoint="/var/lib/kubelet/plugins/display.liken.sh/dra.sock",
                           supported_versions=msg.SUPPORTED_VERSIONS)
    assert REG.PluginInfo.FromString(data) == REG.PluginInfo(
        type="DRAPlugin", name="display.liken.sh",
        endpoint="/var/lib/kubelet/plugins/display.liken.sh/dra.sock",
        supported_versions=list(wire.SUPPORTED_VERSIONS))
    assert REG.RegistrationStatusResponse.FromString(msg.EMPTY) == \
        REG.RegistrationStatusResponse()


devices = st.lists(st.builds(msg.PreparedDevice,
                             request_names=st.lists(text, max_size=2).map(tuple),
                             pool_name=text, device_name=text,
                             cdi_device_ids=st.lists(text, max_size=3).map(tuple)), max_size=3)


@DRA
@given(answers=st.dictionaries(text, st.tuples(devices, text), max_size=4))
def test_prepare_answers_parse_as_protobufs(
        module: Any, answers: dict[str, tuple[list[msg.PreparedDevice], str]]) -> None:
    expected = module.NodePrepareResourcesResponse()
    for uid, (found, error) in answers.items():
        entry = expected.claims[uid]
        entry.error = error
        for d in found:
            entry.devices.add(request_names=list(d.request_names), pool_name=d.pool_name,
                              device_name=d.device_name, cdi_device_ids=list(d.cdi_device_ids))
    assert module.NodePrepareResourcesResponse.FromString(msg.prepare_response(answers)) == \
        expected


@DRA
@given(errors=st.dictionaries(text, text, max_size=4))
def test_unprepare_answers_parse_as_protobufs(module: Any, errors: dict[str, str]) -> None:
    expected = module.NodeUnprepareResourcesResponse()
    for uid, error in errors.items():
        expected.claims[uid].error = error
    assert module.NodeUnprepareResourcesResponse.FromString(msg.unprepare_response(errors)) == \
        expected


int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@given(found=st.lists(st.builds(msg.DeviceHealth, pool_name=text, device_name=text,
                                health=st.sampled_from(msg.Health), last_updated_time=int64,
                                health_check_timeout_seconds=int64, message=text), max_size=3))
def test_health_answers_parse_as_protobufs(found: list[msg.DeviceHealth]) -> None:
    expected = HEALTH.NodeWatchResourcesResponse(devices=[
        HEALTH.DeviceHealth(
            device=HEALTH.DeviceIdentifier(pool_name=d.pool_name, device_name=d.device_name),
            health=int(d.health), last_updated_time=d.last_updated_time,
            health_check_timeout_seconds=d.health_check_timeout_seconds, message=d.message)
        for d in found])
    assert HEALTH.NodeWatchResourcesResponse.FromString(msg.watch_response(found)) == expected
