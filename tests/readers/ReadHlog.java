// The Java HdrHistogram log reader on a podstuck latency.hlog: prints
// "<tag> <calls>" per tag. Run: java -cp hdrhistogram.jar ReadHlog.java FILE
import org.HdrHistogram.*;
import java.io.*;
import java.util.*;

public class ReadHlog {
    public static void main(String[] args) throws Exception {
        HistogramLogReader reader = new HistogramLogReader(args[0]);
        Map<String, Long> counts = new TreeMap<>();
        EncodableHistogram h;
        while ((h = reader.nextIntervalHistogram()) != null) {
            Histogram hist = (Histogram) h;
            counts.merge(hist.getTag() == null ? "" : hist.getTag(), hist.getTotalCount(), Long::sum);
        }
        for (Map.Entry<String, Long> e : counts.entrySet()) System.out.println(e.getKey() + " " + e.getValue());
    }
}
