// Minimal declarations of the Node modules the tests use (no @types/node is installed).
declare module "node:test";
declare module "node:assert/strict";
declare module "node:fs";
declare module "node:os";
declare module "node:path";
declare module "node:http";
declare const process: { env: Record<string, string | undefined>; memoryUsage(): { rss: number; heapUsed: number }; resourceUsage(): { maxRSS: number } };
