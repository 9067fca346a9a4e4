# redis-rb (Debian's ruby-redis) with its default settings, in the compatibility suite
# (cmd/leafd/compat_test.go). The README's client notes show the README:begin blocks.
# Report lines: see compat_test.go.
require "redis"

STDOUT.sync = true
host, port, password = ENV.fetch("LEAFD_HOST"), Integer(ENV.fetch("LEAFD_PORT")), ENV.fetch("LEAFD_PASSWORD")

def check(ok, name, detail = "")
  abort("#{name} failed: #{detail.inspect}") unless ok
  puts "PASS #{name}"
end

def ids(kind, values)
  values.each { |v| puts "ID #{kind} #{Integer(v)}" }
end

r = Redis.new(host: host, port: port, password: password)
check(r.ping == "PONG", "connect")
ids("order", [r.incr("order")])
puts "PASS incr"

order_ids = r.pipelined { |p| 1000.times { p.incr("order") } }
check(order_ids.size == 1000, "pipeline", order_ids.size)
ids("order", order_ids)

ids("order", r.call("IDS.SEGMENT", "order", 10))
puts "PASS segment"

# README:begin redis-rb
# Ruby integers are exact: no option needed.
id = r.call("IDS.SNOWFLAKE") # 2127163742994038805
batch = r.call("IDS.SNOWFLAKE", 1000)
# README:end
check(id.is_a?(Integer) && batch.size == 1000, "snowflake", id)
ids("snowflake", [id] + batch)

# redis-rb 4 speaks RESP2 only: IDS.DECODE is a flat array.
m = Hash[*r.call("IDS.DECODE", id)]
puts "DECODE 2 #{id} #{m['timestamp_ms']} #{m['worker_id']} #{m['sequence']}"

# README:begin redis-rb-errors
begin
  r.call("IDS.SEGMENT", "order", 0)
rescue Redis::CommandError => e
  message = e.message # the reply: "LIMIT count must be between 1 and 1000 (--max-batch); ..."
end
# README:end
check(message.start_with?("LIMIT "), "error", message)

check(r.auth(password) == "OK", "auth")

tx = r.multi do |m|
  m.incr("order")
  m.call("IDS.SEGMENT", "order", 3)
end
check(tx.size == 2 && tx[1].size == 3, "transaction", tx)
ids("order", [tx[0]] + tx[1])

puts "RESTART"
STDIN.gets
# redis-rb reconnects once by itself (reconnect_attempts: 1).
ids("order", [r.incr("order")])
puts "PASS reconnect"
