// dw_comment_total in a line comment; 'server:comment:'
/* block: "server:block:" */
import { Counter } from "prom-client";

export class SoakReporter {
  private readonly prefix = 'server:ts-store:';

  key(ns: string): string {
    return `server:template:${ns}:${this.id(`nested ${ns}`)}`;
  }

  line(status: string, value: number): string {
    return `dw_ts_requests_total{status="${status}"} ${value}`;
  }

  ratio(a: number, b: number): number {
    const re = /'server:regex:'/g;
    return a / b / 2 + (re.test("x") ? 1 : 0);
  }
}

function joined(): string {
  return "server:" + 'joined:' + "tail";
}

const counter = new Counter({ name: "dw_ts_counter_total", help: "x", labelNames: ["kind"] });
const escaped = "dw_ts_escaped{kind=\"a\"} 1";
const gauge = new client.Gauge({ name: 'dw_ts_gauge', help: 'g' });
const latency = new prom.Histogram<'route' | 'code'>({
  name: 'dw_ts_latency_seconds',
  help: 'h',
  labelNames: ['route', 'code'] as const,
  buckets: [0.1, 1],
});
const summary = new Summary({ name: 'dw_ts_summary', help: 's', labelNames: names });
const spread = new Counter({ ...base, name: 'dw_ts_spread_total' });
