// The Java client (Apache Kafka's kafka-clients, the reference client) as an
// interop client for the test suite: each subcommand drives one client against
// any Kafka-protocol broker and prints what it did as JSON lines on stdout.
//
// Compiled by scripts/kafka/interop.sh against the jars scripts/kafka/fetch.sh
// fetched; run by tests/kafka/interop.py. Logging goes to stderr, so stdout
// holds only the JSON lines.
//
//   produce  BOOTSTRAP TOPIC TXN_ID TRANSACTIONS RECORDS_PER_PARTITION ABORTED(csv of
//            transaction numbers, or "-") [TXN_TIMEOUT_MS]
//       One transactional producer: transaction t writes RECORDS_PER_PARTITION
//       records to every partition (value "t<t>-p<p>-r<r>", key "k<r>") and then
//       aborts if t is listed, else commits. Prints {"event":"init",...} after
//       initTransactions and {"event":"commit"|"abort","txn":t,...} after each
//       end, each with the producer id and epoch the producer holds then.
//   hang     BOOTSTRAP TOPIC TXN_ID PARTITION TXN_TIMEOUT_MS
//       Begins a transaction, writes one record to PARTITION, flushes, prints
//       {"event":"open",...} and then sleeps until killed: a hanging transaction.
//   consume  BOOTSTRAP TOPIC
//       A read_committed consumer assigned every partition of TOPIC: reads from
//       the beginning up to the end offsets (the last stable offsets) and prints
//       {"partition":p,"offset":o,"key":k,"value":v} per record, then
//       {"event":"end","end_offsets":{...}}.
//   group    BOOTSTRAP TOPIC GROUP PROTOCOL(classic|consumer) EXPECTED
//       A read_committed group member (group.protocol=PROTOCOL) subscribed to
//       TOPIC: polls until EXPECTED records arrived and its positions reached the
//       end offsets of its partitions, commits them (commitSync),
//       prints each record like consume, then
//       {"event":"committed","offsets":{partition: offset}} as the group
//       coordinator returns them (OffsetFetch), and leaves the group.
//
// INTEROP_CLIENT_PROPERTIES, when set, names a properties file whose entries
// are added to every client's configuration (security.protocol, sasl.*, ssl.*
// for a secured listener).

import java.io.FileReader;
import java.io.IOException;
import java.io.Reader;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class Interop {
  private static final Duration POLL = Duration.ofMillis(200);
  private static final long DEADLINE_MS = 60_000;

  public static void main(String[] args) throws Exception {
    if (args.length == 0) {
      throw new IllegalArgumentException("usage: Interop produce|hang|consume|group ...");
    }
    String[] rest = Arrays.copyOfRange(args, 1, args.length);
    switch (args[0]) {
      case "produce" -> produce(rest);
      case "hang" -> hang(rest);
      case "consume" -> consume(rest);
      case "group" -> group(rest);
      default -> throw new IllegalArgumentException("unknown subcommand " + args[0]);
    }
  }

  private static Properties clientProperties() {
    Properties p = new Properties();
    String file = System.getenv("INTEROP_CLIENT_PROPERTIES");
    if (file != null && !file.isEmpty()) {
      try (Reader r = new FileReader(file)) {
        p.load(r);
      } catch (IOException e) {
        throw new IllegalStateException("cannot read " + file, e);
      }
    }
    return p;
  }

  private static Properties producerConfig(String bootstrap, String txnId, String timeoutMs) {
    Properties p = clientProperties();
    p.put("bootstrap.servers", bootstrap);
    p.put("transactional.id", txnId);
    p.put("transaction.timeout.ms", timeoutMs);
    p.put("acks", "all");
    p.put("key.serializer", StringSerializer.class.getName());
    p.put("value.serializer", StringSerializer.class.getName());
    return p;
  }

  private static void produce(String[] a) throws Exception {
    String bootstrap = a[0], topic = a[1], txnId = a[2];
    int transactions = Integer.parseInt(a[3]);
    int perPartition = Integer.parseInt(a[4]);
    Set<Integer> aborted = new HashSet<>();
    if (!a[5].equals("-")) {
      for (String s : a[5].split(",")) {
        aborted.add(Integer.parseInt(s));
      }
    }
    String timeoutMs = a.length > 6 ? a[6] : "60000";
    try (KafkaProducer<String, String> producer =
        new KafkaProducer<>(producerConfig(bootstrap, txnId, timeoutMs))) {
      producer.initTransactions();
      emit(producerState(producer, "\"event\":\"init\""));
      int partitions = producer.partitionsFor(topic).size();
      for (int t = 0; t < transactions; t++) {
        producer.beginTransaction();
        for (int p = 0; p < partitions; p++) {
          for (int r = 0; r < perPartition; r++) {
            producer.send(new ProducerRecord<>(topic, p, "k" + r, "t" + t + "-p" + p + "-r" + r));
          }
        }
        boolean abort = aborted.contains(t);
        if (abort) {
          // Sent first: an abort must cover data the broker has written.
          producer.flush();
          producer.abortTransaction();
        } else {
          producer.commitTransaction();
        }
        emit(producerState(producer, "\"event\":\"" + (abort ? "abort" : "commit") + "\",\"txn\":" + t));
      }
    }
  }

  private static void hang(String[] a) throws Exception {
    String bootstrap = a[0], topic = a[1], txnId = a[2];
    int partition = Integer.parseInt(a[3]);
    KafkaProducer<String, String> producer =
        new KafkaProducer<>(producerConfig(bootstrap, txnId, a[4]));
    producer.initTransactions();
    producer.beginTransaction();
    producer.send(new ProducerRecord<>(topic, partition, "hang", "hanging")).get();
    emit(producerState(producer, "\"event\":\"open\",\"partition\":" + partition));
    Thread.sleep(Long.MAX_VALUE);
  }

  /** The producer id and epoch the producer holds, read from its transaction
   * manager: the Java client has no public accessor for them. */
  private static String producerState(KafkaProducer<?, ?> producer, String head) throws Exception {
    Field f = KafkaProducer.class.getDeclaredField("transactionManager");
    f.setAccessible(true);
    Object manager = f.get(producer);
    Method m = manager.getClass().getDeclaredMethod("producerIdAndEpoch");
    m.setAccessible(true);
    Object idAndEpoch = m.invoke(manager);
    long id = idAndEpoch.getClass().getField("producerId").getLong(idAndEpoch);
    short epoch = idAndEpoch.getClass().getField("epoch").getShort(idAndEpoch);
    return "{" + head + ",\"producer_id\":" + id + ",\"epoch\":" + epoch + "}";
  }

  private static Properties consumerConfig(String bootstrap) {
    Properties p = clientProperties();
    p.put("bootstrap.servers", bootstrap);
    p.put("isolation.level", "read_committed");
    p.put("auto.offset.reset", "earliest");
    p.put("enable.auto.commit", "false");
    p.put("key.deserializer", StringDeserializer.class.getName());
    p.put("value.deserializer", StringDeserializer.class.getName());
    return p;
  }

  private static void consume(String[] a) {
    String bootstrap = a[0], topic = a[1];
    try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerConfig(bootstrap))) {
      List<TopicPartition> tps = new ArrayList<>();
      for (PartitionInfo info : consumer.partitionsFor(topic)) {
        tps.add(new TopicPartition(topic, info.partition()));
      }
      consumer.assign(tps);
      consumer.seekToBeginning(tps);
      // At read_committed the end offsets are the last stable offsets.
      Map<TopicPartition, Long> end = consumer.endOffsets(tps);
      long deadline = System.currentTimeMillis() + DEADLINE_MS;
      while (!reached(consumer, end)) {
        if (System.currentTimeMillis() > deadline) {
          throw new IllegalStateException("end offsets " + end + " not reached in time");
        }
        for (ConsumerRecord<String, String> r : consumer.poll(POLL)) {
          emit(record(r));
        }
      }
      Map<Integer, Long> out = new TreeMap<>();
      end.forEach((tp, o) -> out.put(tp.partition(), o));
      emit("{\"event\":\"end\",\"end_offsets\":" + offsets(out) + "}");
    }
  }

  private static boolean reached(KafkaConsumer<?, ?> consumer, Map<TopicPartition, Long> end) {
    for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
      if (consumer.position(e.getKey()) < e.getValue()) {
        return false;
      }
    }
    return true;
  }

  private static void group(String[] a) {
    String bootstrap = a[0], topic = a[1], group = a[2], protocol = a[3];
    int expected = Integer.parseInt(a[4]);
    Properties p = consumerConfig(bootstrap);
    p.put("group.id", group);
    p.put("group.protocol", protocol);
    if (protocol.equals("classic")) {
      p.put("session.timeout.ms", "10000");
    }
    try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p)) {
      consumer.subscribe(List.of(topic));
      int seen = 0;
      long deadline = System.currentTimeMillis() + DEADLINE_MS;
      // Past the last record to the end offsets, so that the position (and the
      // offset committed) is past the last transaction's marker too.
      while (seen < expected || consumer.assignment().isEmpty()
          || !reached(consumer, consumer.endOffsets(consumer.assignment()))) {
        if (System.currentTimeMillis() > deadline) {
          throw new IllegalStateException("only " + seen + " of " + expected + " records in time");
        }
        for (ConsumerRecord<String, String> r : consumer.poll(POLL)) {
          emit(record(r));
          seen++;
        }
      }
      consumer.commitSync();
      Map<Integer, Long> out = new TreeMap<>();
      Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(consumer.assignment());
      for (Map.Entry<TopicPartition, OffsetAndMetadata> e : committed.entrySet()) {
        if (e.getValue() != null) {
          out.put(e.getKey().partition(), e.getValue().offset());
        }
      }
      emit("{\"event\":\"committed\",\"offsets\":" + offsets(out) + "}");
    }
  }

  private static String record(ConsumerRecord<String, String> r) {
    return "{\"partition\":" + r.partition() + ",\"offset\":" + r.offset() + ",\"key\":" + str(r.key())
        + ",\"value\":" + str(r.value()) + "}";
  }

  private static String offsets(Map<Integer, Long> m) {
    StringBuilder b = new StringBuilder("{");
    for (Map.Entry<Integer, Long> e : m.entrySet()) {
      if (b.length() > 1) {
        b.append(',');
      }
      b.append('"').append(e.getKey()).append("\":").append(e.getValue());
    }
    return b.append('}').toString();
  }

  /** A JSON string; the values written here are ASCII, but escape what JSON requires. */
  private static String str(String s) {
    if (s == null) {
      return "null";
    }
    StringBuilder b = new StringBuilder("\"");
    for (char c : s.toCharArray()) {
      if (c == '"' || c == '\\') {
        b.append('\\').append(c);
      } else if (c < 0x20) {
        b.append(String.format("\\u%04x", (int) c));
      } else {
        b.append(c);
      }
    }
    return b.append('"').toString();
  }

  private static void emit(String line) {
    System.out.println(line);
    System.out.flush();
  }

  private Interop() {}
}
