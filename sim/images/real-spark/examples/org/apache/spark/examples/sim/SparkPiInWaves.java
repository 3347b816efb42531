// Ours (kube-sim's Spark image): SparkPi in waves with idle pauses between them, for dynamic
// allocation. Each wave's tasks sleep first, so a backlog builds and Spark asks for executors; during
// a pause no task runs, so Spark removes idle executors (spark.dynamicAllocation.executorIdleTimeout).
//
//   SparkPiInWaves [waves=2] [slices=8] [taskMillis=2000] [pauseSeconds=10]
package org.apache.spark.examples.sim;

import org.apache.spark.examples.SparkPi;
import org.apache.spark.sql.SparkSession;

public final class SparkPiInWaves {
  public static void main(String[] args) throws InterruptedException {
    int waves = args.length > 0 ? Integer.parseInt(args[0]) : 2;
    int slices = args.length > 1 ? Integer.parseInt(args[1]) : 8;
    long taskMillis = args.length > 2 ? Long.parseLong(args[2]) : 2000;
    long pauseSeconds = args.length > 3 ? Long.parseLong(args[3]) : 10;
    SparkSession spark = SparkSession.builder().appName("Spark Pi in waves").getOrCreate();
    double pi = 0;
    for (int wave = 1; wave <= waves; wave++) {
      pi = SparkPi.estimate(spark, slices, taskMillis);
      System.out.println("Wave " + wave + " of " + waves + ": Pi is roughly " + pi);
      if (wave < waves) {
        Thread.sleep(pauseSeconds * 1000);
      }
    }
    System.out.println("Pi is roughly " + pi);
    spark.stop();
  }
}
