"""Which env vars Shoal takes for secrets: by the words of their names and by the look of their
values (`shoal._spec.secret_names`, `shoal._spec.secret_values`), and what pipelines set every
day that must stay plain."""

from __future__ import annotations

import base64
import random
import string

import pytest

import shoal
from shoal._spec.secret_names import NotSecret, is_secret, looks_secret, redacted, secret_reason
from shoal._spec.secret_values import credential_kind
from shoal.errors import SpecError

# Fake credentials, in each format's shape (none is valid anywhere).
CREDENTIALS = {
    "sk-proj-4fJq8ZxL2mN7pR1sT9vW3yB6cD0eG5hK": "sk-",
    "sk-ant-api03-Zx81Kq2LmN4pR7sT0vW3yB6cD9eG": "sk-",
    "ghp_1aB2cD3eF4gH5iJ6kL7mN8oP9qR0sT1uV2wX": "GitHub",
    "gho_16C7e42F292c6912E7710c838347Ae178B4a": "GitHub",
    "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEF": "GitHub",
    "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx": "Slack",
    "xoxp-123456789012-123456789012-1234567890123-abcdef": "Slack",
    "AKIAIOSFODNN7EXAMPLE": "AWS",
    "ASIAY34FZKBOKMUTVV7A": "AWS",
    "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789": "Hugging Face",
    "glpat-xY12zW34vU56tS78rQ90": "GitLab",
    "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q": "Google",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U":
        "JSON Web Token",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEow...\n-----END RSA PRIVATE KEY-----": "PEM",
    "-----BEGIN OPENSSH PRIVATE KEY-----": "PEM",
    "postgres://user:password@host/db": "password",
    "redis://:s3cr3t@cache:6379/0": "password",
    "https://alice:hunter2@proxy.example.com:3128": "password",
    "Bearer sk-live-0123456789abcdefghijABCDEFGHIJ": "sk-",  # inside a longer value
    "first,ghp_1aB2cD3eF4gH5iJ6kL7mN8oP9qR0sT1uV2wX": "GitHub",
    "Kq8ZxL2mN7pR1sT9vW3yB6cD0eG5hKjT4nF": "random",  # 35 random-looking characters
    "dGhpcyBpcyBub3QgYSByZWFsIGtleSBidXQ0Mg==": "random",  # base64
}

# What pipelines set (the repository's examples and tests, and the usual ML settings): plain.
PLAIN_VALUES = [
    "1", "0", "false", "true", "WARN", "INFO", "", "8", "1.5", "-1", "mango", "hello",
    "meta-llama/Llama-3.1-8B", "meta-llama/Meta-Llama-3.1-70B-Instruct",
    "mistralai/Mixtral-8x7B-Instruct-v0.1", "Qwen/Qwen2.5-Coder-32B-Instruct-GPTQ-Int4",
    "unsloth/Meta-Llama-3_1-8B-Instruct-bnb-4bit", "HuggingFaceFW/fineweb-edu-score-2-dedup",
    "TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T", "gpt2", "bert-base-uncased",
    "expandable_segments:True", "expandable_segments:True,garbage_collection_threshold:0.8",
    "max_split_size_mb:128", "^docker0,lo", "eth0", "mlx5_0,mlx5_1,mlx5_2,mlx5_3",
    "mlx5_0:1,mlx5_1:1", "0,1,2,3,4,5,6,7", "8.0;8.6;9.0+PTX", "NVL", "SYS", "INIT,COLL",
    "/opt/shoal:/workspace/src", "/usr/local/cuda/lib64:/usr/lib/x86_64-linux-gnu",
    "/home/runner/work/shoal/shoal/tests/faults/programs", "/tmp/hf", "~/.cache/huggingface",
    "/checkpoints/Llama3_8B/run42/step_001000", "/data/shards/train_0000_of_1024/part-00001",
    "s3://my-bucket/checkpoints/llama3-8b/run-2024-06-01", "gs://bucket/datasets/c4/en",
    "https://download.pytorch.org/whl/cu124", "http://minio.storage:9000",
    "http://host:8080/path@v2", "file:///shared/shoal/store", "https://api.wandb.ai",
    "TransformerEncoderLayerWithRotaryEmbedding", "LlamaForCausalLM",
    "r-20261202-080052-3965", "r-20261202-080052-3965-abcdef-012345",
    "E2E_TEST_RUN_20240601T120000Z_NODE3", "2024-06-01T12:00:00Z",
    "550e8400-e29b-41d4-a716-446655440000",  # a UUID
    "5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e",  # hex: a commit, a digest
    "sha256:" + "ab12" * 16, "it's a \"quoted\" value with  two spaces",
    "$HOME and `date` stay as written", "hf_transfer", "sk-1", "mask-ed", "ghp_short",
    "python:3.11-slim-bookworm", "nvcr.io/nvidia/pytorch:24.01-py3", "ghcr.io/example/shoal:0.1.0",
    "c10d", "static", "torch", "nccl", "gloo", "cuda:0", "bf16", "fp8_e4m3", "4Gi", "100m",
]


@pytest.mark.parametrize("value", sorted(CREDENTIALS))
def test_a_credential_looks_like_one_whatever_its_name(value: str) -> None:
    kind = credential_kind(value)
    assert kind is not None and CREDENTIALS[value] in kind, (value, kind)
    assert is_secret("SETTING", value) and redacted({"SETTING": value}) == {
        "SETTING": "<redacted>"}


@pytest.mark.parametrize("value", PLAIN_VALUES)
def test_what_pipelines_set_is_not_taken_for_a_credential(value: str) -> None:
    assert credential_kind(value) is None, value


@pytest.mark.parametrize("name", [
    "HF_TOKEN", "hf_token", "GITHUB_TOKEN_RO", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD",
    "DB_PASSWD", "DB_PWD", "api_key", "WANDB_API_KEY", "TOKEN", "OPENAI_APIKEY", "openaiApiKey",
    "PGPASSWORD", "HFTOKEN", "CLIENT_SECRET", "GOOGLE_APPLICATION_CREDENTIALS", "BASIC_AUTH",
    "AUTH", "GH_PAT", "SSH_PASSPHRASE", "MY_CREDS", "SECRET_KEY_BASE", "AWS_SECRETKEY",
])
def test_a_name_with_a_secret_word_is_secret(name: str) -> None:
    assert looks_secret(name), name
    assert is_secret(name, "anything")


@pytest.mark.parametrize("name", [
    "PATH", "PWD", "OLDPWD", "TOKENIZERS_PARALLELISM", "MAX_NEW_TOKENS", "NUM_TOKENS",
    "AUTHOR", "KEYRING", "MONKEY_PATCH", "MASTER_PORT", "SHOAL_HOME", "HF_TOKEN_PATH",
    "DB_PASSWORD_FILE", "SSH_AUTH_SOCK", "EOS_TOKEN_ID", "PAD_TOKEN_ID", "SECRET_NAME",
    "MAX_TOKEN_LENGTH", "AWS_ACCESS_KEY_ID", "AUTH_TYPE", "PASS_THROUGH", "PASSES",
    "OMP_NUM_THREADS", "NCCL_IB_HCA", "PYTORCH_CUDA_ALLOC_CONF", "CUDA_VISIBLE_DEVICES",
])
def test_a_name_that_only_mentions_a_secret_is_plain(name: str) -> None:
    assert not looks_secret(name), (name, secret_reason(name, "x"))


def test_a_plain_named_variable_is_still_checked_by_its_value() -> None:
    assert is_secret("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
    assert is_secret("DATABASE_URL", "postgres://user:password@host/db")
    assert not is_secret("DATABASE_URL", "postgres://db.internal:5432/app")


def test_not_secret_marks_a_false_alarm_and_stays_a_str() -> None:
    value = shoal.NotSecret("timestamp")
    assert value == "timestamp" and isinstance(value, str) and repr(value) == (
        "NotSecret('timestamp')")
    assert not is_secret("SORT_KEY", value) and is_secret("SORT_KEY", "timestamp")
    assert not is_secret("X", NotSecret("AKIAIOSFODNN7EXAMPLE"))
    assert NotSecret(4096) == "4096"
    with pytest.raises(SpecError, match="NotSecret"):
        NotSecret(None)
    env = shoal.TaskEnvironment("not-secret-env", env_vars={"SORT_KEY": value, "N": 2})
    assert isinstance(env.env_vars["SORT_KEY"], NotSecret)
    assert not isinstance(env.env_vars["N"], NotSecret)


def _miss_rate(make: object, n: int = 4000) -> float:
    assert callable(make)
    return sum(credential_kind(make()) is None for _ in range(n)) / n


def test_how_often_the_entropy_rule_misses_a_random_token() -> None:
    """The long-random-string rule is a heuristic: it is measured here, not trusted. Figures
    (seeded): about 4% of 32-character alphanumeric tokens and 1-2% of 43-character
    base64url tokens are missed (their names are checked as well); 64 characters: under 1%."""
    rng = random.Random(22)
    alnum = string.ascii_letters + string.digits
    rates = {
        "alnum32": _miss_rate(lambda: "".join(rng.choice(alnum) for _ in range(32))),
        "alnum64": _miss_rate(lambda: "".join(rng.choice(alnum) for _ in range(64))),
        "urlsafe43": _miss_rate(
            lambda: base64.urlsafe_b64encode(rng.randbytes(32)).decode().rstrip("=")),
    }
    assert rates["alnum32"] < 0.08 and rates["urlsafe43"] < 0.05, rates
    assert rates["alnum64"] < 0.02, rates
