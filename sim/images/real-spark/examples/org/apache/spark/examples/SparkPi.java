// Ours, not Spark's: the examples jar of the apache/spark image is not in pyspark's package on PyPI,
// so kube-sim's Spark image builds this stand-in for `org.apache.spark.examples.SparkPi` with javac
// against the distribution's jars. It does what Spark's Scala SparkPi does (its argument, its
// "Pi is roughly" line): `slices` tasks sample 100,000 points each of the square around the unit circle.
package org.apache.spark.examples;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ThreadLocalRandom;

import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.sql.SparkSession;

public final class SparkPi {
  public static void main(String[] args) {
    SparkSession spark = SparkSession.builder().appName("Spark Pi").getOrCreate();
    int slices = args.length > 0 ? Integer.parseInt(args[0]) : 2;
    System.out.println("Pi is roughly " + estimate(spark, slices, 0));
    spark.stop();
  }

  /**
   * Pi from the points 1 until n (n = 100,000 × slices, as Spark's example), sampled in `slices`
   * tasks; each task first sleeps `taskMillis` (0: not at all).
   */
  public static double estimate(SparkSession spark, int slices, long taskMillis) {
    long n = Math.min(100000L * slices, Integer.MAX_VALUE);
    List<Integer> parts = new ArrayList<>();
    for (int s = 0; s < slices; s++) {
      parts.add(s);
    }
    JavaSparkContext sc = JavaSparkContext.fromSparkContext(spark.sparkContext());
    long inside = sc.parallelize(parts, slices)
        .map(s -> {
          if (taskMillis > 0) {
            Thread.sleep(taskMillis);
          }
          long from = 1 + (n - 1) * s / slices;
          long to = 1 + (n - 1) * (s + 1) / slices;
          long count = 0;
          ThreadLocalRandom random = ThreadLocalRandom.current();
          for (long i = from; i < to; i++) {
            double x = random.nextDouble() * 2 - 1;
            double y = random.nextDouble() * 2 - 1;
            if (x * x + y * y <= 1) {
              count++;
            }
          }
          return count;
        })
        .reduce(Long::sum);
    return 4.0 * inside / (n - 1);
  }
}
