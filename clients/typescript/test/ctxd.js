// Test support: a real ctxd serve, started as a subprocess on a free
// port with a temporary store, and the ctxd command line beside it.

import { spawn, execFile } from "node:child_process";
import { rmSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const execFileP = promisify(execFile);

/** The repository's root: where go build runs. */
export const repoRoot = resolve(fileURLToPath(new URL("../../..", import.meta.url)));

let built;

/**
 * ctxdBin returns the ctxd binary: $CTXD_BIN, else one built once with
 * go build from the repository.
 */
export function ctxdBin() {
  if (process.env.CTXD_BIN) return Promise.resolve(process.env.CTXD_BIN);
  built ??= (async () => {
    const dir = await mkdtemp(join(tmpdir(), "ctxd-ts-bin-"));
    process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
    const bin = join(dir, "ctxd");
    await execFileP("go", ["build", "-o", bin, "./cmd/ctxd"], { cwd: repoRoot, maxBuffer: 16 << 20 });
    return bin;
  })();
  return built;
}

/**
 * startCtxd runs `ctxd serve` on a free port with a temporary --data
 * directory, and resolves once it prints its ready line. args are more
 * flags, env more environment. stop() ends it with SIGTERM and waits for its exit.
 */
export async function startCtxd(args = [], env = {}) {
  const bin = await ctxdBin();
  const dir = await mkdtemp(join(tmpdir(), "ctxd-serve-"));
  const child = spawn(bin, ["serve", "--port", "-1", "--data", join(dir, "data"), "--log-level", "warn", ...args], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, ...env },
  });
  let stderr = "";
  child.stderr.setEncoding("utf8");
  child.stderr.on("data", (s) => {
    stderr += s;
  });
  const exited = new Promise((res) => child.once("exit", (code, signal) => res({ code, signal })));
  const url = await new Promise((res, rej) => {
    let out = "";
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (s) => {
      out += s;
      const m = /ctxd ready (nats:\/\/\S+)/.exec(out);
      if (m) res(m[1]);
    });
    exited.then(({ code, signal }) => rej(new Error(`ctxd serve exited (${code ?? signal}) before it was ready:\n${stderr}`)));
  });
  return {
    url,
    bin,
    logs: () => stderr,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      const { code, signal } = await exited;
      await rm(dir, { recursive: true, force: true });
      if (code !== 0) throw new Error(`ctxd serve exited (${code ?? signal}):\n${stderr}`);
    },
  };
}

/**
 * ctxdCommand runs the ctxd command line and returns its standard output
 * as bytes, or throws with its standard error.
 */
export async function ctxdCommand(args) {
  const bin = await ctxdBin();
  const { stdout } = await execFileP(bin, args, { encoding: "buffer", maxBuffer: 1 << 30 });
  return stdout;
}

/** ctxdFails runs the ctxd command line, which must fail, and returns its standard error. */
export async function ctxdFails(args) {
  const bin = await ctxdBin();
  try {
    await execFileP(bin, args, { maxBuffer: 16 << 20 });
  } catch (err) {
    return String(err.stderr);
  }
  throw new Error(`ctxd ${args.join(" ")} succeeded`);
}
