"""The Kafka Connection (confluent-kafka's words) as Spark's Java Kafka client needs it."""

from __future__ import annotations

import pytest

from lagsched.adapters.spark import KafkaConfigError, java_kafka_config


def test_plaintext_passes_as_written() -> None:
    config = {"bootstrap.servers": "b:9092", "client.rack": "a", "max.poll.records": 5000}
    assert java_kafka_config(config) == {"bootstrap.servers": "b:9092", "client.rack": "a", "max.poll.records": "5000"}


def test_scram_and_a_pem_ca_become_a_jaas_config_and_a_pem_truststore() -> None:
    got = java_kafka_config(
        {
            "bootstrap.servers": "b:9093",
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "scram-sha-256",
            "sasl.username": "svc",
            "sasl.password": 'p"w\\d',
            "ssl.ca.location": "/etc/ssl/kafka-ca.pem",
        }
    )
    assert got == {
        "bootstrap.servers": "b:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        # Quotes and backslashes escaped as JAAS reads them.
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="svc" '
        'password="p\\"w\\\\d";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/etc/ssl/kafka-ca.pem",
    }
    assert not any(k in got for k in ("sasl.username", "sasl.password", "ssl.ca.location"))


def test_a_jaas_config_or_truststore_given_for_java_wins() -> None:
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="x" password="y";'
    got = java_kafka_config(
        {
            "sasl.mechanisms": "PLAIN",
            "sasl.username": "u",
            "sasl.password": "p",
            "sasl.jaas.config": jaas,
            "ssl.ca.location": "/ca.pem",
            "ssl.truststore.location": "/trust.p12",
        }
    )
    assert got["sasl.jaas.config"] == jaas and got["ssl.truststore.location"] == "/trust.p12"
    assert "ssl.truststore.type" not in got


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"sasl.mechanisms": "OAUTHBEARER", "sasl.username": "u"}, "set sasl.jaas.config"),
        ({"ssl.certificate.location": "/c.pem", "ssl.key.location": "/k.pem"}, "ssl.keystore.location"),
    ],
)
def test_what_cannot_be_translated_is_refused_saying_what_to_set(config: dict[str, str], named: str) -> None:
    with pytest.raises(KafkaConfigError, match=named):
        java_kafka_config(config)
