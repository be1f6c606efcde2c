"""A write that names what an acknowledged write just made (a message's level, an observation to withdraw)
finds it when it carries that write's consistency token, however far behind the projector is."""

from __future__ import annotations

import grpc

from peerlog.v1 import common_pb2
from peerlog.v1 import configuration_pb2 as cfg
from peerlog.v1 import configuration_pb2_grpc as cfg_grpc
from peerlog.v1 import observations_pb2 as o
from services.cli.client import Client

TIMES = 20


async def test_a_message_level_set_right_after_its_add_is_found_under_the_adds_token(channel):
    c = Client(channel)
    await c.setup_conversation("w", "s")
    stub = cfg_grpc.ConfigurationServiceStub(channel)
    for i in range(TIMES):
        added = await c.add("w", "s", [("alice", f"hello {i}")])
        await stub.SetMessageConfiguration(
            cfg.SetMessageConfigurationRequest(
                workspace_id="w",
                session_id="s",
                message_id=added.message_ids[0],
                configuration=cfg.Configuration(dreams=False),
                consistency=common_pb2.ReadConsistency(consistency_token=added.consistency_token),
            )
        )


async def test_an_observation_deleted_right_after_its_creation_is_found_under_the_creations_token(channel):
    c = Client(channel)
    await c.workspace("w")
    await c.peer("w", "alice")
    for i in range(TIMES):
        made = await c.create_observations("w", "alice", "alice", [f"alice likes tea number {i}"])
        await c.observations.DeleteObservation(
            o.DeleteObservationRequest(
                workspace_id="w",
                observation_id=made.observation_ids[0],
                reason="changed my mind",
                consistency=common_pb2.ReadConsistency(consistency_token=made.consistency_token),
            )
        )
    # a bad token is the caller's mistake, said before anything is looked up
    try:
        await c.observations.DeleteObservation(
            o.DeleteObservationRequest(
                workspace_id="w", observation_id="x", consistency=common_pb2.ReadConsistency(consistency_token="nope")
            )
        )
    except grpc.aio.AioRpcError as error:
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    else:
        raise AssertionError("a malformed consistency token was accepted")
