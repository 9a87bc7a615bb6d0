"""Settings that point Spark's S3A file system and pyiceberg at S3 or an S3-compatible store.

Credentials never appear here: S3A's default credential chain and pyiceberg read the standard AWS
environment variables (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``) or an
instance profile, so they stay out of Spark's conf, command lines and logs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlsplit

from lagsched.environment import aws_region

__all__ = ["pyiceberg_s3_properties", "s3a_spark_conf"]


def s3a_spark_conf(endpoint: str | None) -> dict[str, str]:
    """``spark.hadoop.fs.s3a.*`` for ``endpoint`` (None: AWS S3 with its own endpoints).

    An explicit endpoint is an S3-compatible store (S3Proxy, MinIO, Ceph): path-style requests
    (buckets are not DNS names there), TLS only for ``https://``.

    >>> conf = s3a_spark_conf("http://127.0.0.1:19000")
    >>> conf["spark.hadoop.fs.s3a.endpoint"], conf["spark.hadoop.fs.s3a.connection.ssl.enabled"]
    ('http://127.0.0.1:19000', 'false')
    >>> "spark.hadoop.fs.s3a.endpoint" in s3a_spark_conf(None)
    False
    """
    conf = {
        "spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        # The environment first, then the SDK's default chain (profiles, instance roles).
        "spark.hadoop.fs.s3a.aws.credentials.provider": (
            "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider,"
            "org.apache.hadoop.fs.s3a.auth.IAMInstanceCredentialsProvider"
        ),
    }
    if endpoint:
        conf.update(
            {
                "spark.hadoop.fs.s3a.endpoint": endpoint,
                "spark.hadoop.fs.s3a.endpoint.region": aws_region(),
                "spark.hadoop.fs.s3a.path.style.access": "true",
                "spark.hadoop.fs.s3a.connection.ssl.enabled": str(urlsplit(endpoint).scheme == "https").lower(),
            }
        )
    return conf


def pyiceberg_s3_properties(endpoint: str | None, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """pyiceberg FileIO properties for ``s3a://`` warehouses, credentials from the environment."""
    env = os.environ if env is None else env
    props = {"s3.region": aws_region(env)}
    if env.get("AWS_ACCESS_KEY_ID"):
        props["s3.access-key-id"] = env["AWS_ACCESS_KEY_ID"]
        props["s3.secret-access-key"] = env.get("AWS_SECRET_ACCESS_KEY", "")
    if endpoint:
        props["s3.endpoint"] = endpoint
        props["s3.force-virtual-addressing"] = "false"
    return props
