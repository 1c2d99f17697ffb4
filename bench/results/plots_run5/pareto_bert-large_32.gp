set terminal svg size 1400,650 dynamic background rgb 'white'
set output 'pareto_bert-large_32.svg'
set title 'bert-large, batch 32: peak memory against step time (NVIDIA H200)' noenhanced
set xlabel 'step time (ms)'
set ylabel 'peak allocated (MiB)'
set grid
set key outside right top vertical maxrows 60 font ',10' noenhanced
set offsets graph 0.05, graph 0.05, graph 0.1, graph 0.1
plot 'pareto_bert-large_32.dat' index 0 using 3:2 with points pt 5 ps 1.6 lc rgb '#1f77b4' title 'PyTorch eager (12203 MiB, 194.4 ms)', 'pareto_bert-large_32.dat' index 1 using 3:2 with points pt 5 ps 1.6 lc rgb '#ff7f0e' title 'PyTorch ckpt (4523 MiB, 253.6 ms)', 'pareto_bert-large_32.dat' index 2 using 3:2 with points pt 7 ps 1.6 lc rgb '#2ca02c' title 'mutwo baseline (12172 MiB, 197.7 ms)', 'pareto_bert-large_32.dat' index 3 using 3:2 with points pt 7 ps 1.6 lc rgb '#d62728' title 'mutwo baseline-cuda-graph (12172 MiB, 194.6 ms)', 'pareto_bert-large_32.dat' index 4 using 3:2 with points pt 7 ps 1.6 lc rgb '#9467bd' title 'mutwo per-layer (CUDA graph) (4876 MiB, 252.2 ms)', 'pareto_bert-large_32.dat' index 5 using 3:2 with points pt 7 ps 1.6 lc rgb '#8c564b' title 'mutwo mutwo (CUDA graph) (4652 MiB, 242.3 ms)'
set terminal pngcairo size 1400,650 background rgb 'white'
set output 'pareto_bert-large_32.png'
set title 'bert-large, batch 32: peak memory against step time (NVIDIA H200)' noenhanced
set xlabel 'step time (ms)'
set ylabel 'peak allocated (MiB)'
set grid
set key outside right top vertical maxrows 60 font ',10' noenhanced
set offsets graph 0.05, graph 0.05, graph 0.1, graph 0.1
plot 'pareto_bert-large_32.dat' index 0 using 3:2 with points pt 5 ps 1.6 lc rgb '#1f77b4' title 'PyTorch eager (12203 MiB, 194.4 ms)', 'pareto_bert-large_32.dat' index 1 using 3:2 with points pt 5 ps 1.6 lc rgb '#ff7f0e' title 'PyTorch ckpt (4523 MiB, 253.6 ms)', 'pareto_bert-large_32.dat' index 2 using 3:2 with points pt 7 ps 1.6 lc rgb '#2ca02c' title 'mutwo baseline (12172 MiB, 197.7 ms)', 'pareto_bert-large_32.dat' index 3 using 3:2 with points pt 7 ps 1.6 lc rgb '#d62728' title 'mutwo baseline-cuda-graph (12172 MiB, 194.6 ms)', 'pareto_bert-large_32.dat' index 4 using 3:2 with points pt 7 ps 1.6 lc rgb '#9467bd' title 'mutwo per-layer (CUDA graph) (4876 MiB, 252.2 ms)', 'pareto_bert-large_32.dat' index 5 using 3:2 with points pt 7 ps 1.6 lc rgb '#8c564b' title 'mutwo mutwo (CUDA graph) (4652 MiB, 242.3 ms)'
