"""The broker can be secured: KafkaSettings carries SASL and TLS settings, refuses half of them at start, and
every Kafka client peerlog builds starts from its one client_config, so none reaches the broker without
the credentials."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest
from pydantic import ValidationError

from projections.projector import consumer_config as projector_consumer_config
from services.bus.settings import KafkaSettings
from services.bus.subscription import consumer_config as subscription_consumer_config
from services.cli.transactions import _command_config
from services.settings import Settings

REPO = Path(__file__).resolve().parents[2]
SASL = {
    "security_protocol": "SASL_PLAINTEXT",
    "sasl_mechanism": "SCRAM-SHA-512",
    "sasl_username": "peerlog",
    "sasl_password": "s3cret",
}


@pytest.fixture
def pem_files(tmp_path: Path) -> dict[str, Path]:
    files = {name: tmp_path / f"{name}.pem" for name in ("ca", "cert", "key")}
    for name, path in files.items():
        path.write_text(f"-----BEGIN {name.upper()}-----\n-----END {name.upper()}-----\n")
    return files


def test_an_unsecured_broker_is_reached_with_the_bootstrap_servers_alone():
    config = KafkaSettings(bootstrap_servers="k1:9092,k2:9092").client_config()

    assert config == {"bootstrap.servers": "k1:9092,k2:9092", "security.protocol": "plaintext"}


def test_sasl_ssl_clients_carry_the_credentials_and_certificates(pem_files):
    kafka = KafkaSettings(
        **{**SASL, "security_protocol": "SASL_SSL"},
        ssl_ca_location=pem_files["ca"],
        ssl_certificate_location=pem_files["cert"],
        ssl_key_location=pem_files["key"],
    )

    assert kafka.client_config() == {
        "bootstrap.servers": "127.0.0.1:9092",
        "security.protocol": "sasl_ssl",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "peerlog",
        "sasl.password": "s3cret",
        "ssl.ca.location": str(pem_files["ca"]),
        "ssl.certificate.location": str(pem_files["cert"]),
        "ssl.key.location": str(pem_files["key"]),
    }


def test_the_security_settings_are_read_from_peerlog_kafka_variables(monkeypatch):
    for name, value in SASL.items():
        monkeypatch.setenv(f"PEERLOG_KAFKA_{name.upper()}", value)

    config = Settings().kafka.client_config()

    assert (config["security.protocol"], config["sasl.username"], config["sasl.password"]) == (
        "sasl_plaintext",
        "peerlog",
        "s3cret",
    )


def test_the_sasl_password_is_not_shown_when_the_settings_are_printed():
    kafka = KafkaSettings(**SASL)

    assert "s3cret" not in repr(kafka) and "s3cret" not in str(kafka.model_dump())


@pytest.mark.parametrize("missing", ["sasl_mechanism", "sasl_username", "sasl_password"])
def test_a_sasl_protocol_without_its_credentials_refuses_to_start_naming_what_is_missing(missing):
    given = {name: value for name, value in SASL.items() if name != missing}

    with pytest.raises(ValidationError, match=f"SASL_PLAINTEXT needs PEERLOG_KAFKA_{missing.upper()}"):
        KafkaSettings(**given)


def test_credentials_a_plaintext_client_would_never_send_are_refused():
    with pytest.raises(ValidationError, match="PEERLOG_KAFKA_SASL_USERNAME is set but .*PLAINTEXT uses no SASL"):
        KafkaSettings(sasl_username="peerlog")


def test_a_tls_file_that_does_not_exist_is_refused(tmp_path):
    missing = tmp_path / "no-such-ca.pem"

    with pytest.raises(ValidationError, match=re.escape(f"PEERLOG_KAFKA_SSL_CA_LOCATION={missing} is not a file")):
        KafkaSettings(security_protocol="SSL", ssl_ca_location=missing)


def test_a_client_certificate_without_its_key_is_refused(pem_files):
    with pytest.raises(ValidationError, match="PEERLOG_KAFKA_SSL_CERTIFICATE_LOCATION and .*_SSL_KEY_LOCATION go"):
        KafkaSettings(security_protocol="SSL", ssl_certificate_location=pem_files["cert"])


def test_tls_files_under_a_protocol_without_tls_are_refused(pem_files):
    with pytest.raises(ValidationError, match="PEERLOG_KAFKA_SSL_CA_LOCATION is set but .* uses no TLS"):
        KafkaSettings(**SASL, ssl_ca_location=pem_files["ca"])


def test_the_projector_and_event_streams_consume_with_the_credentials():
    kafka = KafkaSettings(**SASL)

    for config in (projector_consumer_config(Settings(kafka=kafka), "g"), subscription_consumer_config(kafka)):
        assert config["sasl.password"] == "s3cret" and config["security.protocol"] == "sasl_plaintext"


def test_no_kafka_client_is_configured_outside_the_settings_client_config():
    # a client written with "bootstrap.servers" by hand would reach a secured broker without credentials
    settings = REPO / "services" / "bus" / "settings.py"
    sources = [*(REPO / "services").rglob("*.py"), *(REPO / "projections").rglob("*.py")]

    by_hand = [
        str(path.relative_to(REPO)) for path in sources if path != settings and "bootstrap.servers" in path.read_text()
    ]

    assert by_hand == []


def test_kafkas_transactions_command_gets_the_credentials_in_an_owner_only_file(tmp_path):
    kafka = KafkaSettings(**{**SASL, "sasl_password": 'a"b\\c'})

    option, path = _command_config(kafka, tmp_path)

    properties = Path(path).read_text()
    assert option == "--command-config"
    assert stat.S_IMODE(Path(path).stat().st_mode) == 0o600
    assert "security.protocol=SASL_PLAINTEXT\n" in properties
    assert "sasl.mechanism=SCRAM-SHA-512\n" in properties
    # JAAS escapes the quote and backslash, and the .properties file each backslash again
    assert 'ScramLoginModule required username="peerlog" password="a\\\\"b\\\\\\\\c";' in properties


def test_kafkas_transactions_command_gets_no_config_file_for_an_unsecured_broker(tmp_path):
    assert _command_config(KafkaSettings(), tmp_path) == []
    assert list(tmp_path.iterdir()) == []
