import { Context } from '@temporalio/activity';
import type { MetricMeter } from '@temporalio/common';

/** The running activity's metric meter, or none outside an activity (unit tests call the steps directly). */
export function activityMeter(): MetricMeter | undefined {
  try {
    return Context.current().metricMeter;
  } catch {
    return undefined;
  }
}
