import { Context } from '@temporalio/activity';

/**
 * A line in the worker's log from inside an apply activity (nowhere outside one): what a channel says about a
 * device's answer that the answer itself does not carry loudly (a receipt not passed on, and why).
 */
export function activityWarning(line: string): void {
  try {
    Context.current().log.warn(line);
  } catch {
    /* not in an activity */
  }
}
