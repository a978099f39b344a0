import { WavegateError } from './errors';
import type { FieldProblem } from './validation';

/**
 * Files a process reads because a workflow input, update or signal named them (a rollout's
 * `inventoryPath`, a nightly canary's inventory, spec and profiles root, the inventory a board revert
 * reads): who can write such an input is not who configured the process, so the process reads them only
 * under roots its own configuration names (intake/worker-files.ts checks real paths), and what it says
 * about them leaves the host (workflow history, audit, an HTTP answer) without a byte of their content.
 * Pure: the messages, decided here.
 */

/** How many problem positions a refusal lists before "and N more". */
const LISTED_PROBLEMS = 5;

/** Said after every refusal rebuilt without content, so the reader knows where the detail is. */
const VALUES_NOT_SHOWN = "values not shown: the file's content never leaves this host; read it there";

/**
 * A path named by an input, refused because it is not under any configured root: names the field, the
 * path (never its content), the roots, and how to allow it.
 */
export function outsideRootsRefusal(
  field: string,
  path: string,
  roots: readonly string[],
  how: { reads: string; allow: string },
): WavegateError {
  const where = roots.length
    ? `outside the directories this ${how.reads} (${roots.join(', ')}), links and ".." resolved`
    : `not read: this ${how.reads} from no directory (none configured)`;
  return new WavegateError('INVALID_INPUT', `${field} ${JSON.stringify(path)}: ${where}; to allow it, ${how.allow}`, {
    field,
    value: path,
    contentFree: true,
  });
}

/** A problem's position: its field path; an unknown key is named by where it is, not by its (file-chosen) name. */
function positionOf(problem: FieldProblem): string {
  if (!problem.message.startsWith('unknown field')) return problem.path;
  const parent = problem.path.replace(/(\.[^.[\]]+|\[[^\]]*\])$/, '');
  return `${parent === problem.path ? '(root)' : parent} (an unknown field)`;
}

/**
 * The refusal of a file an input named, fit to leave the host: the field, the path, and where in the file
 * (a syntax error's line and column, each invalid field's path), never a value read from it: a YAML
 * parser's message shows the offending line, a schema's problem the value it refused, and the file may be
 * a secret a forged input pointed at. An error its maker marked `contentFree` (unreadable, too large, a
 * StrictModes refusal) keeps its message.
 */
export function withoutContent(field: string, path: string, what: string, err: WavegateError): WavegateError {
  const details = { field, value: path, contentFree: true };
  if (err.details.contentFree === true) {
    const message = err.message.startsWith(`${field} `) ? err.message : `${field} ${err.message}`;
    return new WavegateError(err.code, message, details);
  }
  const head = `${field} ${JSON.stringify(path)}`;
  const syntax = err.details.syntax;
  if (syntax === 'YAML' || syntax === 'JSON') {
    const at = typeof err.details.position === 'string' ? ` at ${err.details.position}` : '';
    return new WavegateError(err.code, `${head}: not valid ${syntax}${at} (${VALUES_NOT_SHOWN})`, details);
  }
  const problems = Array.isArray(err.details.problems) ? (err.details.problems as FieldProblem[]) : [];
  if (problems.length) {
    const listed = problems.slice(0, LISTED_PROBLEMS).map(positionOf).join(', ');
    const more = problems.length > LISTED_PROBLEMS ? ` and ${problems.length - LISTED_PROBLEMS} more` : '';
    const count = `${problems.length} problem${problems.length === 1 ? '' : 's'}`;
    return new WavegateError(
      err.code,
      `${head}: not a valid ${what}: ${count}, at ${listed}${more} (${VALUES_NOT_SHOWN})`,
      details,
    );
  }
  return new WavegateError(err.code, `${head}: not a valid ${what} (${VALUES_NOT_SHOWN})`, details);
}
