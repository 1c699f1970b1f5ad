// @warden/sdk: the TypeScript SDK for Warden, the self-hostable sandbox platform for AI agents.

export * from "./client.js";
export * from "./errors.js";
export { DEFAULT_SOCKET, DEFAULT_URL, ENV_API_KEY, ENV_URL, defaultSocket, unixFetch } from "./http.js";
export type { Body, ClientOptions, RetryPolicy } from "./http.js";
/** The API's wire types, generated from spec/openapi.yaml (`types.Sandbox` is a sandbox's JSON). */
export * as types from "./types.js";
export { ERROR_STATUS, OPERATIONS } from "./types.js";
