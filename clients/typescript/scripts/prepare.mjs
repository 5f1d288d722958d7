// `npm install ./clients/typescript` links this folder and runs its `prepare` script, but does not install its
// devDependencies; so the build installs them itself (the committed lock, `npm ci`) when TypeScript is missing,
// then compiles src/ to dist/ (ES modules with declarations).
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = join(dirname(fileURLToPath(import.meta.url)), "..");
const tsc = join(here, "node_modules", "typescript", "bin", "tsc");

if (!existsSync(tsc)) {
  const npm = process.env.npm_execpath;
  const [command, args] = npm ? [process.execPath, [npm]] : ["npm", []];
  execFileSync(command, [...args, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"], {
    cwd: here,
    stdio: "inherit",
  });
}
execFileSync(process.execPath, [tsc, "-p", "tsconfig.json"], { cwd: here, stdio: "inherit" });
