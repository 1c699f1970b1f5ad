"""Python SDK for Warden, the self-hostable sandbox platform for AI agents.

    from warden import Warden

    client = Warden()  # $WARDEN_URL and $WARDEN_API_KEY
    with client.sandboxes.create() as sb:
        print(sb.exec("echo hello").stdout)

See sdk/python/README.md; :mod:`warden.aio` has the asyncio client (native asyncio).
"""

from ._http import DEFAULT_SOCKET, DEFAULT_URL, ENV_API_KEY, ENV_URL, Response, RetryPolicy
from ._aio_http import AsyncResponse
from .aio import AsyncFiles, AsyncProcess, AsyncPty, AsyncSandbox, AsyncWarden, AsyncWatchHandle
from .client import (
    CodeError,
    CodeResult,
    ExecResult,
    Execution,
    Files,
    Process,
    ProcessOutput,
    Pty,
    Sandbox,
    Warden,
    WatchHandle,
)
from .errors import (
    APIError,
    ApprovalRequiredError,
    AuthError,
    BadGatewayError,
    BadRequestError,
    ConflictError,
    ConnectionError,
    ForbiddenError,
    GatewayTimeoutError,
    InternalError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitedError,
    StreamError,
    UnavailableError,
    ValidationError,
    WardenError,
)

__version__ = "0.1.0"

__all__ = [
    "Warden", "AsyncWarden", "Sandbox", "AsyncSandbox", "Process", "AsyncProcess", "ProcessOutput",
    "ExecResult", "Files", "WatchHandle", "Pty", "AsyncPty", "Execution", "CodeResult", "CodeError",
    "AsyncFiles", "AsyncWatchHandle", "AsyncResponse", "Response", "RetryPolicy", "DEFAULT_URL", "DEFAULT_SOCKET", "ENV_URL", "ENV_API_KEY",
    "WardenError", "APIError", "BadRequestError", "ValidationError", "AuthError", "ForbiddenError",
    "PermissionDeniedError", "ApprovalRequiredError", "NotFoundError", "ConflictError",
    "PayloadTooLargeError", "RateLimitedError", "UnavailableError", "InternalError",
    "GatewayTimeoutError", "BadGatewayError", "StreamError", "ConnectionError",
]
